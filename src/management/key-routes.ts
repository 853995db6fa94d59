// API keys of a sub-account: mint, list, get, revoke, roll (docs/api.md, API keys of a
// sub-account; docs/credentials.md, key lifecycle).
import type { FastifyRequest } from 'fastify'
import { DEFAULT_ROLL_OVERLAP_SECONDS } from '../shared/key-expiry.js'
import { getKey, listKeys } from '../store/api-keys.js'
import {
  type ManagementContext,
  managementOperation,
  notFound,
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
  noBodyIsEmpty,
  revokeSubAccountKey,
  rollSubAccountKey,
  withSecrets,
} from './key-actions.js'
import type { OperationTable } from './operation-table.js'
import { subAccountOperation } from './operation-shapes.js'
import { keyListScope } from './paging.js'
import { presentKey } from '../schemas/present.js'
import { ApiKey, ApiKeyPage, KeyParams, MintedApiKey, MintKeyBody, RollKeyBody } from '../schemas/keys.js'
import { PAGE_LIMIT_DEFAULT, PageQuery } from '../schemas/common.js'

/** The calling parent's sub-account named in the path (404 otherwise), and who acts on its keys. */
async function keyContext(
  request: FastifyRequest,
  subId: string,
  { sql, cache, keyMinted }: ManagementContext,
): Promise<KeyActionContext> {
  return {
    sql,
    cache,
    origin: originOf(request),
    parentId: parentOf(request).id,
    subAccount: await ownSubAccount(sql, request, subId),
    keyMinted,
  }
}

/** API keys of a sub-account, in the order they are registered. */
export const KEY_OPERATIONS: OperationTable<ManagementContext> = [
  managementOperation({
    method: 'POST',
    url: '/:sub_id/api-keys',
    ...subAccountOperation('sub_accounts:write', 'createApiKey', {
      body: MintKeyBody,
      response: { 201: MintedApiKey },
    }),
    async handler(request, reply, context) {
      const mint = checkedMintBody(request.body)
      const minted = await mintSubAccountKey(await keyContext(request, request.params.sub_id, context), mint)
      // The key and the secret are in this response only: nothing on the way may keep a copy.
      return reply
        .code(201)
        .header('cache-control', 'no-store')
        .send(withSecrets(minted.row, minted.apiKey, minted.clientSecret!))
    },
  }),

  managementOperation({
    method: 'GET',
    url: '/:sub_id/api-keys',
    ...subAccountOperation('sub_accounts:read', 'listApiKeys', {
      querystring: PageQuery,
      response: { 200: ApiKeyPage },
    }),
    async handler(request, _reply, { sql, cursors }) {
      const { limit = PAGE_LIMIT_DEFAULT, cursor } = request.query
      const scope = keyListScope(parentOf(request).id, request.params.sub_id)
      const afterSeq = await cursors.decode(cursor, scope)
      const subAccount = await ownSubAccount(sql, request, request.params.sub_id)
      const rows = await listKeys(sql, subAccount.id, { limit: limit + 1, afterSeq })
      const nowMs = Date.now()
      return cursors.page(rows, limit, (row) => presentKey(row, nowMs), scope)
    },
  }),

  managementOperation({
    method: 'GET',
    url: '/:sub_id/api-keys/:key_id',
    ...subAccountOperation('sub_accounts:read', 'getApiKey', { params: KeyParams, response: { 200: ApiKey } }),
    async handler(request, _reply, { sql }) {
      const { sub_id, key_id } = request.params
      const subAccount = await ownSubAccount(sql, request, sub_id)
      const row = await getKey(sql, subAccount.id, pathUuid(key_id, 'key'))
      if (row === null) throw notFound('key')
      return presentKey(row)
    },
  }),

  managementOperation({
    method: 'POST',
    url: '/:sub_id/api-keys/:key_id/revoke',
    ...subAccountOperation('sub_accounts:write', 'revokeApiKey', { params: KeyParams, response: { 200: ApiKey } }),
    async handler(request, _reply, context) {
      const { sub_id, key_id } = request.params
      const keys = await keyContext(request, sub_id, context)
      return presentKey(await revokeSubAccountKey(keys, pathUuid(key_id, 'key')))
    },
  }),

  managementOperation({
    method: 'POST',
    url: '/:sub_id/api-keys/:key_id/roll',
    ...subAccountOperation('sub_accounts:write', 'rollApiKey', {
      params: KeyParams,
      body: RollKeyBody,
      response: { 201: MintedApiKey },
    }),
    preValidation: noBodyIsEmpty,
    async handler(request, reply, context) {
      const { sub_id, key_id } = request.params
      const keys = await keyContext(request, sub_id, context)
      const { minted } = await rollSubAccountKey(
        keys,
        pathUuid(key_id, 'key'),
        request.body.expires_in_seconds ?? DEFAULT_ROLL_OVERLAP_SECONDS,
      )
      return reply
        .code(201)
        .header('location', `${MANAGEMENT_PREFIX}/${keys.subAccount.id}/api-keys/${minted.row.id}`)
        .header('cache-control', 'no-store')
        .send(withSecrets(minted.row, minted.apiKey, minted.clientSecret!))
    },
  }),
]
