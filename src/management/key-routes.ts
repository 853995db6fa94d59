// API keys of a sub-account: mint, list, revoke (docs/api.md, API keys of a sub-account).
import { mintKey } from '../auth/mint.js'
import { keyEntries } from '../cache/index.js'
import { validationFailed } from '../errors.js'
import { listKeys, revokeKey } from '../store/keys.js'
import {
  type ManagementApp,
  type ManagementContext,
  notFound,
  operation,
  ownSubAccount,
  parentOf,
  pathUuid,
  trimmedName,
} from './common.js'
import { keyListScope } from './paging.js'
import { presentKey } from './present.js'
import { ApiKey, ApiKeyPage, KeyParams, ListKeysQuery, MintedApiKey, MintKeyBody, SubAccountParams } from './schemas.js'

export function registerKeyRoutes(app: ManagementApp, { sql, cache, cursors }: ManagementContext): void {
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
      const { name, scopes } = request.body
      const reserved = scopes.findIndex((scope) => scope === 'sub_accounts' || scope.startsWith('sub_accounts:'))
      if (reserved !== -1) {
        throw validationFailed([
          { path: `/body/scopes/${reserved}`, message: 'sub_accounts scopes are for parent keys only' },
        ])
      }
      const label = trimmedName(name, '/body/name')
      const subAccount = await ownSubAccount(sql, request, request.params.sub_id)
      const minted = await mintKey(sql, { tenantId: subAccount.id, name: label, scopes, withClientSecret: true })
      await cache.invalidate(keyEntries({ id: minted.row.id, keyDigest: minted.keyDigest }))
      const { revoked_at: _revoked, last_used_at: _used, ...key } = presentKey(minted.row)
      // The key and the secret are in this response only: nothing on the way may keep a copy.
      return reply
        .code(201)
        .header('cache-control', 'no-store')
        .send({ ...key, api_key: minted.apiKey, client_secret: minted.clientSecret! })
    },
  )

  app.get(
    '/:sub_id/api-keys',
    {
      schema: {
        ...operation('listApiKeys'),
        params: SubAccountParams,
        querystring: ListKeysQuery,
        response: { 200: ApiKeyPage },
      },
    },
    async (request) => {
      const { limit, cursor } = request.query
      const scope = keyListScope(parentOf(request).id, request.params.sub_id)
      const afterSeq = await cursors.decode(cursor, scope)
      const subAccount = await ownSubAccount(sql, request, request.params.sub_id)
      const rows = await listKeys(sql, subAccount.id, { limit: limit + 1, afterSeq })
      return cursors.page(rows, limit, presentKey, scope)
    },
  )

  app.post(
    '/:sub_id/api-keys/:key_id/revoke',
    { schema: { ...operation('revokeApiKey'), params: KeyParams, response: { 200: ApiKey } } },
    async (request) => {
      const { sub_id, key_id } = request.params
      const subAccount = await ownSubAccount(sql, request, sub_id)
      const row = await revokeKey(sql, subAccount.id, pathUuid(key_id, 'key'))
      if (row === null) throw notFound('key')
      await cache.invalidate(keyEntries({ id: row.id, keyDigest: row.key_digest }))
      return presentKey(row)
    },
  )
}
