// API keys of a sub-account: mint, list, get, revoke, roll (docs/api.md, API keys of a
// sub-account; docs/credentials.md, key lifecycle).
import type { FastifyRequest } from 'fastify'
import { DEFAULT_ROLL_OVERLAP_SECONDS } from '../shared/key-expiry.js'
import { getKey, listKeys } from '../store/api-keys.js'
import {
  type ManagementApp,
  type ManagementContext,
  notFound,
  operation,
  originOf,
  ownSubAccount,
  parentOf,
  pathUuid,
} from './common.js'
import { MANAGEMENT_PREFIX } from '../shared/paths.js'
import {
  checkedMintBody,
  type KeyActionContext,
  mintSubAccountKey,
  revokeSubAccountKey,
  rollSubAccountKey,
  withSecrets,
} from './key-actions.js'
import { keyListScope } from './paging.js'
import { presentKey } from '../schemas/present.js'
import { ApiKey, ApiKeyPage, KeyParams, MintedApiKey, MintKeyBody, RollKeyBody } from '../schemas/keys.js'
import { PAGE_LIMIT_DEFAULT, PageQuery } from '../schemas/common.js'
import { SubAccountParams } from '../schemas/sub-accounts.js'

export function registerKeyRoutes(app: ManagementApp, { sql, cache, cursors, keyMinted }: ManagementContext): void {
  /** The calling parent's sub-account named in the path (404 otherwise), and who acts on its keys. */
  const keyContext = async (request: FastifyRequest, subId: string): Promise<KeyActionContext> => ({
    sql,
    cache,
    origin: originOf(request),
    parentId: parentOf(request).id,
    subAccount: await ownSubAccount(sql, request, subId),
    keyMinted,
  })

  app.post(
    '/:sub_id/api-keys',
    {
      schema: {
        ...operation('createApiKey'),
        params: SubAccountParams,
        body: MintKeyBody,
        response: { 201: MintedApiKey },
      },
    },
    async (request, reply) => {
      const mint = checkedMintBody(request.body)
      const minted = await mintSubAccountKey(await keyContext(request, request.params.sub_id), mint)
      // The key and the secret are in this response only: nothing on the way may keep a copy.
      return reply
        .code(201)
        .header('cache-control', 'no-store')
        .send(withSecrets(minted.row, minted.apiKey, minted.clientSecret!))
    },
  )

  app.get(
    '/:sub_id/api-keys',
    {
      schema: {
        ...operation('listApiKeys'),
        params: SubAccountParams,
        querystring: PageQuery,
        response: { 200: ApiKeyPage },
      },
    },
    async (request) => {
      const { limit = PAGE_LIMIT_DEFAULT, cursor } = request.query
      const scope = keyListScope(parentOf(request).id, request.params.sub_id)
      const afterSeq = await cursors.decode(cursor, scope)
      const subAccount = await ownSubAccount(sql, request, request.params.sub_id)
      const rows = await listKeys(sql, subAccount.id, { limit: limit + 1, afterSeq })
      const nowMs = Date.now()
      return cursors.page(rows, limit, (row) => presentKey(row, nowMs), scope)
    },
  )

  app.get(
    '/:sub_id/api-keys/:key_id',
    { schema: { ...operation('getApiKey'), params: KeyParams, response: { 200: ApiKey } } },
    async (request) => {
      const { sub_id, key_id } = request.params
      const subAccount = await ownSubAccount(sql, request, sub_id)
      const row = await getKey(sql, subAccount.id, pathUuid(key_id, 'key'))
      if (row === null) throw notFound('key')
      return presentKey(row)
    },
  )

  app.post(
    '/:sub_id/api-keys/:key_id/revoke',
    { schema: { ...operation('revokeApiKey'), params: KeyParams, response: { 200: ApiKey } } },
    async (request) => {
      const { sub_id, key_id } = request.params
      const context = await keyContext(request, sub_id)
      return presentKey(await revokeSubAccountKey(context, pathUuid(key_id, 'key')))
    },
  )

  app.post(
    '/:sub_id/api-keys/:key_id/roll',
    {
      schema: { ...operation('rollApiKey'), params: KeyParams, body: RollKeyBody, response: { 201: MintedApiKey } },
      // No body at all is an empty one: every field is optional.
      preValidation: async (request) => {
        request.body ??= {}
      },
    },
    async (request, reply) => {
      const { sub_id, key_id } = request.params
      const context = await keyContext(request, sub_id)
      const { minted } = await rollSubAccountKey(
        context,
        pathUuid(key_id, 'key'),
        request.body.expires_in_seconds ?? DEFAULT_ROLL_OVERLAP_SECONDS,
      )
      return reply
        .code(201)
        .header('location', `${MANAGEMENT_PREFIX}/${context.subAccount.id}/api-keys/${minted.row.id}`)
        .header('cache-control', 'no-store')
        .send(withSecrets(minted.row, minted.apiKey, minted.clientSecret!))
    },
  )
}
