// API keys of a sub-account: mint, list, get, revoke, roll (docs/api.md, API keys of a
// sub-account; docs/credentials.md, key lifecycle).
import { isManagementScope } from '../auth/scopes.js'
import { DEFAULT_ROLL_OVERLAP_SECONDS, parseExpiresAt } from '../auth/key-expiry.js'
import { mintKeyWithEvent, revokeKeyWithEvent } from '../auth/key-changes.js'
import { rollKey } from '../auth/roll.js'
import { keyEntries } from '../cache/index.js'
import { ApiError, validationFailed } from '../errors.js'
import { checkAllowlist } from '../guardrails/key-policy.js'
import { checkExpiry, checkScopes } from '../guardrails/mint-rules.js'
import { getKey, listKeys } from '../store/api-keys.js'
import { scopeCeiling } from '../store/tenants.js'
import {
  MANAGEMENT_PREFIX,
  type ManagementApp,
  type ManagementContext,
  notFound,
  operation,
  originOf,
  ownSubAccount,
  parentOf,
  pathUuid,
  trimmedName,
} from './common.js'
import { keyListScope } from './paging.js'
import { presentKey } from './present.js'
import {
  ApiKey,
  ApiKeyPage,
  KeyParams,
  MintedApiKey,
  MintKeyBody,
  PAGE_LIMIT_DEFAULT,
  PageQuery,
  RollKeyBody,
  SubAccountParams,
} from './schemas.js'

/** A key with its secrets, as the mint and the roll show it, once. */
function withSecrets(row: Parameters<typeof presentKey>[0], apiKey: string, clientSecret: string) {
  const { revoked_at: _revoked, last_used_at: _used, ...key } = presentKey(row)
  return { ...key, api_key: apiKey, client_secret: clientSecret }
}

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
      const reserved = scopes.findIndex(isManagementScope)
      if (reserved !== -1) {
        throw validationFailed([
          { path: `/body/scopes/${reserved}`, message: 'sub_accounts scopes are for parent keys only' },
        ])
      }
      const label = trimmedName(name, '/body/name')
      let expiresAt: Date | null = null
      if (request.body.expires_at != null) {
        const parsed = parseExpiresAt(request.body.expires_at)
        if ('error' in parsed) throw validationFailed([{ path: '/body/expires_at', message: parsed.error }])
        expiresAt = parsed.at
      }
      const subAccount = await ownSubAccount(sql, request, request.params.sub_id)
      const rules = { ceiling: await scopeCeiling(sql, parentOf(request).id), policy: subAccount.key_policy }
      checkScopes(rules, scopes, '/body/scopes')
      checkExpiry(rules, expiresAt, Date.now())
      const ipAllowlist = request.body.ip_allowlist ?? null
      checkAllowlist(ipAllowlist, '/body/ip_allowlist')
      const minted = await mintKeyWithEvent(sql, originOf(request), parentOf(request).id, {
        tenantId: subAccount.id,
        name: label,
        scopes,
        withClientSecret: true,
        expiresAt,
        ipAllowlist: ipAllowlist === null ? null : [...new Set(ipAllowlist)],
      })
      await cache.invalidate(keyEntries({ id: minted.row.id, keyDigest: minted.keyDigest }))
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
      const subAccount = await ownSubAccount(sql, request, sub_id)
      const row = await revokeKeyWithEvent(
        sql,
        originOf(request),
        parentOf(request).id,
        subAccount.id,
        pathUuid(key_id, 'key'),
      )
      if (row === null) throw notFound('key')
      await cache.invalidate(keyEntries({ id: row.id, keyDigest: row.key_digest }))
      return presentKey(row)
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
      const subAccount = await ownSubAccount(sql, request, sub_id)
      const result = await rollKey(sql, {
        tenantId: subAccount.id,
        keyId: pathUuid(key_id, 'key'),
        overlapSeconds: request.body.expires_in_seconds ?? DEFAULT_ROLL_OVERLAP_SECONDS,
        withClientSecret: true,
        origin: originOf(request),
        accountId: parentOf(request).id,
        rules: { ceiling: await scopeCeiling(sql, parentOf(request).id), policy: subAccount.key_policy },
      })
      if (result.outcome === 'not_found') throw notFound('key')
      if (result.outcome === 'not_active')
        throw new ApiError('key_not_active', `the key is ${result.state}: only an active key can be rolled`)
      const { old, minted } = result
      // Committed: both keys' cache entries are stale (the old key's expiry moved, the new one may be cached as unknown).
      await cache.invalidate([
        ...keyEntries({ id: old.id, keyDigest: old.key_digest }),
        ...keyEntries({ id: minted.row.id, keyDigest: minted.keyDigest }),
      ])
      return reply
        .code(201)
        .header('location', `${MANAGEMENT_PREFIX}/${subAccount.id}/api-keys/${minted.row.id}`)
        .header('cache-control', 'no-store')
        .send(withSecrets(minted.row, minted.apiKey, minted.clientSecret!))
    },
  )
}
