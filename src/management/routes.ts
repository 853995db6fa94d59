// The management API under /v1/sub-accounts (docs/api.md). Parent keys only, acting as themselves.
import { continueAfterChecks } from '../http/expect-continue.js'
import type { FastifyPluginAsync, FastifyRequest } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { ApiError, validationFailed } from '../errors.js'
import { mintKey } from '../auth/mint.js'
import { requireScope } from '../auth/scopes.js'
import type { Sql } from '../store/db.js'
import { listKeys, revokeKey } from '../store/keys.js'
import { cursorSecret } from '../store/secrets.js'
import {
  createSubAccount,
  ExternalIdTakenError,
  getSubAccount,
  listSubAccounts,
  setSubAccountStatus,
  updateSubAccount,
  type TenantRow,
} from '../store/tenants.js'
import type { Principal } from '../auth/authenticate.js'
import { isUuid } from '../tenancy/identifiers.js'
import { tenancyHook } from '../tenancy/hook.js'
import type { TenancyLookups } from '../tenancy/lookups.js'
import { cacheKeys, subAccountEntries, type CacheInvalidator } from '../cache/index.js'
import { usageRows } from '../store/usage.js'
import { reportRange, usageEntries } from '../usage/report.js'
import { addManagementDeadline, markManagementRoutes } from './hooks.js'
import { OPERATIONS } from './operations.js'
import { Cursors, keyListScope } from './paging.js'
import { presentKey, presentSubAccount } from './present.js'
import {
  ApiKey,
  ApiKeyPage,
  CreateSubAccountBody,
  KeyParams,
  ListKeysQuery,
  ListSubAccountsQuery,
  MintedApiKey,
  MintKeyBody,
  NAME_MAX_LENGTH,
  SubAccount,
  SubAccountPage,
  SubAccountParams,
  UpdateSubAccountBody,
  UsageQuery,
  UsageReport,
} from './schemas.js'

export const MANAGEMENT_PREFIX = '/v1/sub-accounts'

export interface ManagementOptions {
  sql: Sql
  lookups: TenancyLookups
  /** Told the cache entries a committed change made stale (docs/architecture.md, caches). */
  cache: CacheInvalidator
  bodyTimeoutMs?: number // how long a body may take to arrive (hooks.ts)
}

/** Management is for parent keys acting as their own account, with the scope of the method. */
function authorizeManagement(request: FastifyRequest): void {
  const principal = request.principal!
  if (principal.tenant.parentId !== null) {
    throw new ApiError('parent_key_required', 'sub-account keys cannot manage sub-accounts')
  }
  if (request.actingTenant!.id !== principal.tenant.id) {
    throw new ApiError(
      'parent_key_required',
      'sub-accounts are managed by the parent acting as itself (X-Service-Acting-Tenant: self)',
    )
  }
  requireScope(
    principal.key.scopes,
    request.method === 'GET' || request.method === 'HEAD' ? 'sub_accounts:read' : 'sub_accounts:write',
  )
}

function trimmedName(name: string, path: string): string {
  const trimmed = name.trim()
  const length = [...trimmed].length
  if (length < 1 || length > NAME_MAX_LENGTH) {
    throw validationFailed([{ path, message: `must hold 1 to ${NAME_MAX_LENGTH} characters after trimming` }])
  }
  return trimmed
}

async function withConflictAsHttp<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run()
  } catch (err) {
    if (err instanceof ExternalIdTakenError) {
      throw new ApiError('external_id_conflict', 'another sub-account of this parent already has this external_id')
    }
    throw err
  }
}

const notFound = (what = 'sub-account') => new ApiError('not_found', `no such ${what}`)

/** A path id, lower-cased; one that is not a UUID names nothing (docs/api.md: 404). */
function pathUuid(value: string, what?: string): string {
  if (!isUuid(value)) throw notFound(what)
  return value.toLowerCase()
}

const operation = (operationId: keyof typeof OPERATIONS) => ({ operationId, ...OPERATIONS[operationId] })

export const managementRoutes: FastifyPluginAsync<ManagementOptions> = async (plugin, options) => {
  const { sql, lookups, cache } = options
  const app = plugin.withTypeProvider<TypeBoxTypeProvider>()
  markManagementRoutes(plugin)
  addManagementDeadline(plugin, options.bodyTimeoutMs)
  app.addHook('onRequest', tenancyHook(lookups))
  app.addHook('onRequest', async (request) => authorizeManagement(request))
  app.addHook('onRequest', continueAfterChecks(plugin.initialConfig.bodyLimit ?? 0))

  const parentOf = (request: FastifyRequest): Principal['tenant'] => request.principal!.tenant
  const cursors = new Cursors(() => cursorSecret(sql))

  /** The caller's sub-account named in the path, or 404 (also for another parent's). */
  async function ownSubAccount(request: FastifyRequest, subId: string): Promise<TenantRow> {
    const row = await getSubAccount(sql, parentOf(request).id, pathUuid(subId))
    if (row === null) throw notFound()
    return row
  }

  app.post(
    '/',
    { schema: { ...operation('createSubAccount'), body: CreateSubAccountBody, response: { 201: SubAccount } } },
    async (request, reply) => {
      const body = request.body
      const row = await withConflictAsHttp(() =>
        createSubAccount(sql, parentOf(request).id, {
          name: trimmedName(body.name, '/body/name'),
          externalId: body.external_id ?? null,
          metadata: body.metadata ?? {},
        }),
      )
      // A "not found" for its id or external_id may be cached, and the parent's active count changed.
      await cache.invalidate([
        ...subAccountEntries(row.parent_id!, row.id),
        cacheKeys.anyActive(row.parent_id!),
        ...(row.external_id === null ? [] : [cacheKeys.externalId(row.parent_id!, row.external_id)]),
      ])
      return reply.code(201).header('location', `${MANAGEMENT_PREFIX}/${row.id}`).send(presentSubAccount(row))
    },
  )

  app.get(
    '/',
    {
      schema: { ...operation('listSubAccounts'), querystring: ListSubAccountsQuery, response: { 200: SubAccountPage } },
    },
    async (request) => {
      const { limit, cursor, status, external_id } = request.query
      const scope = { list: 'sub-accounts', owner: parentOf(request).id } as const
      const rows = await listSubAccounts(sql, parentOf(request).id, {
        limit: limit + 1,
        afterSeq: await cursors.decode(cursor, scope),
        status: status ?? null,
        externalId: external_id ?? null,
      })
      return cursors.page(rows, limit, presentSubAccount, scope)
    },
  )

  // Registered before /:sub_id; the router prefers this static segment anyway.
  app.get(
    '/usage',
    { schema: { ...operation('getUsage'), querystring: UsageQuery, response: { 200: UsageReport } } },
    async (request) => {
      const { limit, cursor } = request.query
      const scope = { list: 'usage', owner: parentOf(request).id } as const
      const afterSeq = await cursors.decode(cursor, scope)
      const { from, to } = reportRange(request.query, Date.now())
      const rows = await usageRows(sql, parentOf(request).id, { from, to, afterSeq, limit: limit + 1 })
      return { from, to, ...(await cursors.page(usageEntries(rows), limit, ({ seq: _seq, ...entry }) => entry, scope)) }
    },
  )

  app.get(
    '/:sub_id',
    { schema: { ...operation('getSubAccount'), params: SubAccountParams, response: { 200: SubAccount } } },
    async (request) => presentSubAccount(await ownSubAccount(request, request.params.sub_id)),
  )

  app.patch(
    '/:sub_id',
    {
      schema: {
        ...operation('updateSubAccount'),
        params: SubAccountParams,
        body: UpdateSubAccountBody,
        response: { 200: SubAccount },
      },
    },
    async (request) => {
      const body = request.body
      const name = body.name === undefined ? undefined : trimmedName(body.name, '/body/name')
      const subId = pathUuid(request.params.sub_id)
      // The update is scoped to the parent: no row back means unknown or another parent's.
      const row = await withConflictAsHttp(() =>
        updateSubAccount(sql, parentOf(request).id, subId, {
          name,
          externalId: body.external_id,
          metadata: body.metadata,
        }),
      )
      if (row === null) throw notFound()
      if (row.external_id !== row.previous_external_id) {
        await cache.invalidate(
          [row.external_id, row.previous_external_id]
            .filter((externalId) => externalId !== null)
            .map((externalId) => cacheKeys.externalId(row.parent_id!, externalId))
            .concat(subAccountEntries(row.parent_id!, row.id)),
        )
      }
      return presentSubAccount(row)
    },
  )

  for (const [action, status] of [
    ['deactivate', 'deactivated'],
    ['reactivate', 'active'],
  ] as const) {
    app.post(
      `/:sub_id/${action}`,
      { schema: { ...operation(`${action}SubAccount`), params: SubAccountParams, response: { 200: SubAccount } } },
      async (request) => {
        const row = await setSubAccountStatus(sql, parentOf(request).id, pathUuid(request.params.sub_id), status)
        if (row === null) throw notFound()
        await cache.invalidate([...subAccountEntries(row.parent_id!, row.id), cacheKeys.anyActive(row.parent_id!)])
        return presentSubAccount(row)
      },
    )
  }

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
      const subAccount = await ownSubAccount(request, request.params.sub_id)
      const minted = await mintKey(sql, { tenantId: subAccount.id, name: label, scopes, withClientSecret: true })
      await cache.invalidate([cacheKeys.key(minted.keyDigest)])
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
      const subAccount = await ownSubAccount(request, request.params.sub_id)
      const rows = await listKeys(sql, subAccount.id, { limit: limit + 1, afterSeq })
      return cursors.page(rows, limit, presentKey, scope)
    },
  )

  app.post(
    '/:sub_id/api-keys/:key_id/revoke',
    { schema: { ...operation('revokeApiKey'), params: KeyParams, response: { 200: ApiKey } } },
    async (request) => {
      const { sub_id, key_id } = request.params
      const subAccount = await ownSubAccount(request, sub_id)
      const row = await revokeKey(sql, subAccount.id, pathUuid(key_id, 'key'))
      if (row === null) throw notFound('key')
      await cache.invalidate([cacheKeys.key(row.key_digest)])
      return presentKey(row)
    },
  )
}
