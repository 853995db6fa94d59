// What the management route files share: the typed instance they register on, the context the
// plugin hands them, and the small checks every handler uses (docs/api.md, Management API).
import type { RouteStatus } from '../proxy/route-status.js'
import type { Alerts } from '../alerts/plugin.js'
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { FastifyBaseLogger, FastifyInstance, FastifyRequest, RawServerDefault } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import { ApiError, validationFailed } from '../errors.js'
import type { Principal } from '../auth/principal.js'
import { type MANAGEMENT_SCOPES, requireScope } from '../shared/scopes.js'
import type { Origin } from '../events/record.js'
import type { CacheInvalidator } from '../cache/index.js'
import type { Sql } from '../store/db.js'
import { getSubAccount, ExternalIdTakenError, type TenantRow } from '../store/tenants.js'
import { isExternalId, isUuid } from '../shared/identifiers.js'
import type { TenancyLookups } from '../shared/tenancy-records.js'
import type { KeyImportPlaces } from './key-import-places.js'
import type { RequestLogReader } from './log-reads.js'
import { defineOperation } from './operation-table.js'
import { OPERATIONS } from './operations.js'
import type { Cursors } from './paging.js'
import type { LookupAll } from '../webhooks/url-policy.js'
import { NAME_MAX_LENGTH } from '../schemas/common.js'

export type ManagementApp = FastifyInstance<
  RawServerDefault,
  IncomingMessage,
  ServerResponse,
  FastifyBaseLogger,
  TypeBoxTypeProvider
>

/** What the route files' handlers are given by the plugin. */
export interface ManagementContext {
  sql: Sql
  /**
   * The heavy reads' pool (store/db.ts, heavyReadSql): what a route marked `heavyRead`
   * (heavy-reads.ts) reads through, so that its statements stop when its call is answered 503.
   */
  reads: Sql
  /** Told the cache entries a committed change made stale (docs/architecture.md, caches). */
  cache: CacheInvalidator
  cursors: Cursors
  /** Told the end of each key minted or rolled (the alerts'). */
  keyMinted: Alerts['keyMinted']
  /** What the webhook endpoint routes need: the key their secrets are sealed under, and the URL rules. */
  webhooks: {
    encryptionKey: Buffer
    allowInsecure: boolean
    lookup: LookupAll | undefined
    /** WEBHOOK_ENDPOINTS_MAX: a parent's endpoints at most. */
    endpointsMax: number
  }
  /** The request log's reader; null when it is off (REQUEST_LOG_RETENTION_DAYS=0): every list is then empty. */
  requestLog: RequestLogReader | null
  /** What tells a request log filter's sub-account and key from another parent's, read when a call comes. */
  ownerLookups: () => Pick<TenancyLookups, 'subAccount' | 'keyById'>
  /** The portal's public address (ISSUER_URL), where a portal session's link points. */
  portalIssuerUrl: string | null
  /** The proxied routes and their targets' state now (GET /routes). */
  routeStatuses: () => RouteStatus[]
  /** The usage period's length (USAGE_PERIOD_SECONDS), the export's `source` (ISSUER_URL) and receiver. */
  usageExport: UsageExportSettings
  /** This replica's key imports under way, bounded per parent and in all (key-import-places.ts). */
  keyImports: KeyImportPlaces
}

export interface UsageExportSettings {
  periodSeconds: number
  source: string
  /** The push's receiver as the store names it (usage/exporter.ts, exportTarget); null with no push. */
  pushTarget: string | null
  /** The most sub-account meters one reconciliation answers (RECONCILIATION_MAX_ROWS). */
  reconciliationMaxRows: number
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The scope a management operation needs (authorizeManagement checks it). */
    scope?: ManagementScope
    /** Its store deadline, when not `managementMs` (hooks.ts): the key of StoreDeadlines it takes. */
    storeDeadline?: 'simulationMs'
    /**
     * The handler reads the body as a stream (application/x-ndjson, a key import): no JSON parse,
     * no Idempotency-Key, and its own body deadline (hooks.ts).
     */
    streamedBody?: true
  }
}

export type ManagementScope = (typeof MANAGEMENT_SCOPES)[number]

/** A management operation: an entry of its resource's table, registered by routes.ts. */
export const managementOperation = defineOperation<ManagementContext>()

/** Management is for parent keys acting as their own account, with the scope of the operation (its route's config). */
export function authorizeManagement(request: FastifyRequest): void {
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
  requireScope(principal.key.scopes, request.routeOptions.config.scope!)
}

/** The calling parent (authorizeManagement has made sure it is one). */
export const parentOf = (request: FastifyRequest): Principal['tenant'] => request.principal!.tenant

/**
 * Who makes a change through the API, for its event (docs/events.md): the key, the request, the
 * address; and the request's Idempotency-Key claim, which the change's transaction marks.
 */
export function originOf(request: FastifyRequest): Origin {
  const idempotent = request.idempotency
  return {
    actor: { type: 'api_key', key_id: request.principal!.key.id },
    requestId: request.id,
    sourceIp: request.ip,
    idempotency: idempotent?.claim == null ? null : { slot: idempotent.slot, claim: idempotent.claim },
  }
}

export function trimmedName(name: string, path: string): string {
  const trimmed = name.trim()
  const length = [...trimmed].length
  if (length < 1 || length > NAME_MAX_LENGTH) {
    throw validationFailed([{ path, message: `must hold 1 to ${NAME_MAX_LENGTH} characters after trimming` }])
  }
  return trimmed
}

export async function withConflictAsHttp<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run()
  } catch (err) {
    if (err instanceof ExternalIdTakenError) {
      throw new ApiError('external_id_conflict', 'another sub-account of this parent already has this external_id')
    }
    throw err
  }
}

export const notFound = (what = 'sub-account') => new ApiError('not_found', `no such ${what}`)

/**
 * A path id, lower-cased; one that is not a UUID names nothing (docs/api.md: 404), and the detail
 * says the path takes an id. A sub-account's path segment shaped as an external_id (`acme-eu`) is
 * pointed to the list's `?external_id=`, which finds the sub-account by it.
 */
export function pathUuid(value: string, what = 'sub-account'): string {
  if (isUuid(value)) return value.toLowerCase()
  const byExternalId =
    what === 'sub-account' && isExternalId(value)
      ? `; to find the one whose external_id is ${value}, GET /v1/sub-accounts?external_id=${encodeURIComponent(value)}`
      : ''
  throw new ApiError('not_found', `no such ${what}: the path takes its id, a UUID${byExternalId}`)
}

/** The caller's sub-account named in the path, or 404 (also for another parent's). */
export async function ownSubAccount(sql: Sql, request: FastifyRequest, subId: string): Promise<TenantRow> {
  const row = await getSubAccount(sql, parentOf(request).id, pathUuid(subId))
  if (row === null) throw notFound()
  return row
}

export const operation = (operationId: keyof typeof OPERATIONS) => ({ operationId, ...OPERATIONS[operationId] })
