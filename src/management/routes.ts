// The management API under /v1/sub-accounts (docs/api.md). Parent keys only, acting as themselves.
// This plugin gives every route its hooks, MANAGEMENT_HOOKS in the order they run, then registers
// the operations: a table per resource in the files beside it, MANAGEMENT_OPERATIONS in order.
import type { Alerts } from '../alerts/plugin.js'
import type { FastifyInstance, FastifyPluginAsync } from 'fastify'
import type { CacheInvalidator } from '../cache/index.js'
import { continueAfterChecks } from '../http/expect-continue.js'
import { unsupportedMediaType } from '../errors.js'
import type { Rate } from '../limits/bucket.js'
import type { Limiter } from '../limits/limiter.js'
import type { Sql } from '../store/db.js'
import { cursorSecret } from '../store/secrets.js'
import { tenancyHook } from '../tenancy/hook.js'
import type { TenancyLookups } from '../shared/tenancy-records.js'
import { ACCOUNT_OPERATIONS } from './account-routes.js'
import { PROXIED_ROUTE_OPERATIONS } from './proxied-route-routes.js'
import type { RouteStatus } from '../proxy/route-status.js'
import { KeyImportPlaces } from './key-import-places.js'
import { authorizeManagement, type ManagementContext, type UsageExportSettings } from './common.js'
import { EVENT_OPERATIONS } from './event-routes.js'
import type { RequestLogReader } from './log-reads.js'
import { REQUEST_OPERATIONS } from './request-routes.js'
import { gateHeavyReads } from './heavy-reads.js'
import {
  bodyDeadline,
  clearDeadlines,
  dropLateAnswers,
  MANAGEMENT_BODY_TIMEOUT_MS,
  STREAMED_BODY_TIMEOUT_MS,
  markManagementRoute,
  refuseUnknownQuery,
  resumeStoreDeadline,
  startStoreDeadline,
} from './hooks.js'
import {
  claimIdempotencyKey,
  fingerprintBody,
  idempotencyRequests,
  keepIdempotentAnswer,
  readIdempotencyKey,
  startIdempotencySweep,
} from './idempotency.js'
import { KEY_OPERATIONS } from './key-routes.js'
import { KEY_IMPORT_OPERATIONS } from './key-import-routes.js'
import { KEY_LEAK_OPERATIONS } from './key-leak-routes.js'
import { CREDIT_OPERATIONS } from './credit-routes.js'
import { KEY_USAGE_OPERATIONS } from './key-usage-routes.js'
import { USAGE_EXPORT_OPERATIONS } from './usage-export-routes.js'
import { USAGE_RECONCILIATION_OPERATIONS } from './usage-reconciliation-routes.js'
import { LIMIT_SIMULATION_OPERATIONS } from './limit-simulation-routes.js'
import { type OperationTable, registerOperations } from './operation-table.js'
import { PLAN_OPERATIONS } from './plan-routes.js'
import { SETTINGS_OPERATIONS } from './settings-routes.js'
import { PORTAL_SESSION_OPERATIONS } from './portal-session-routes.js'
import { Cursors } from './paging.js'
import { managementRate } from '../limits/management-rate.js'
import { SUB_ACCOUNT_COLLECTION_OPERATIONS, SUB_ACCOUNT_ITEM_OPERATIONS } from './sub-account-routes.js'
import { WEBHOOK_DELIVERY_OPERATIONS } from './webhook-delivery-routes.js'
import { WEBHOOK_ENDPOINT_OPERATIONS } from './webhook-endpoint-routes.js'
import type { LookupAll } from '../webhooks/url-policy.js'
import { DEFAULT_WEBHOOK_ENDPOINTS_MAX } from './webhook-endpoint-admission.js'

export interface ManagementOptions {
  sql: Sql
  /**
   * The main pool as the handlers use it: their statements are cancelled when their call is
   * answered 503 at its store deadline (store/call-statements.ts, hooks.ts); `sql` when none.
   */
  callSql?: Sql
  /** The heavy reads' own pool (Store.heavyReadSql); `sql` when the store has none (heavy-reads.ts). */
  heavyReadSql?: Sql
  /** How long a key import's answer waits for its client to read on (key-import-places.ts). */
  keyImportAnswerStallMs?: number
  /** The bytes a replica's key import spools hold together at most (key-import-places.ts). */
  keyImportSpoolBytes?: number
  lookups: TenancyLookups
  /** Told the cache entries a committed change made stale (docs/internals.md, caches). */
  cache: CacheInvalidator
  bodyTimeoutMs?: number // how long a body may take to arrive (hooks.ts)
  streamedBodyTimeoutMs?: number | undefined // the same for a body read as a stream (a key import)
  limiter: Limiter
  /** Each parent's rate here (MANAGEMENT_RATE). */
  rate: Rate
  /** ENCRYPTION_KEY: the kept answers of idempotent requests and webhook secrets are sealed under it. */
  encryptionKey: Buffer
  /** WEBHOOKS_ALLOW_INSECURE: webhook endpoints may be http and at any address (development, tests). */
  webhooksAllowInsecure: boolean
  /** WEBHOOK_ENDPOINTS_MAX: a parent's webhook endpoints at most (default 20). */
  webhookEndpointsMax?: number | undefined
  /** Resolves webhook URLs' names at creation (default node:dns lookup; tests inject a slow one). */
  webhookLookup?: LookupAll | undefined
  /** How often expired idempotency keys are deleted (default 60 s; tests shorten it). */
  idempotencySweepIntervalMs?: number | undefined
  /** The request log's reader; null when it is off (request-log/plugin.ts). */
  requestLog: RequestLogReader | null
  /** Told the end of each key minted or rolled (the alerts'). */
  keyMinted: Alerts['keyMinted']
  /** The portal's public address (ISSUER_URL), when the portal is served (CONSOLE=on); null: no portal sessions. */
  portalIssuerUrl: string | null
  /** The proxied routes and their targets' state now (GET /routes), read when asked. */
  routeStatuses: () => RouteStatus[]
  /** The usage period and the export's source (usage-export-routes.ts). */
  usageExport: UsageExportSettings
}

type HookPhase = 'onRoute' | 'onRequest' | 'preParsing' | 'preValidation' | 'onSend' | 'onResponse'

/** A hook of the management scope: its phase, and the hook made from the plugin's options. */
export interface ManagementHook {
  name: string
  phase: HookPhase
  hook: (options: ManagementOptions, scope: FastifyInstance) => (...args: never[]) => unknown
}

/**
 * The management scope's hooks, phase by phase, in the order they run (docs/architecture.md, the
 * request's way). The onRoute hooks see each operation as it is registered, after these are added.
 */
export const MANAGEMENT_HOOKS: readonly ManagementHook[] = [
  { name: 'route kind', phase: 'onRoute', hook: () => markManagementRoute },
  // Inside the late answers' drop: a heavy read that waited past its deadline ends late too.
  { name: 'heavy reads gated', phase: 'onRoute', hook: () => gateHeavyReads() },
  { name: 'late answers dropped', phase: 'onRoute', hook: () => dropLateAnswers },
  { name: 'unknown query refused', phase: 'onRoute', hook: () => refuseUnknownQuery },
  // Before the body: the store deadline covers the tenancy lookups; a refusal never waits for a body.
  { name: 'store deadline starts', phase: 'onRequest', hook: () => startStoreDeadline },
  { name: 'tenancy', phase: 'onRequest', hook: (o) => tenancyHook(o.lookups) },
  { name: 'authorization', phase: 'onRequest', hook: () => async (request) => authorizeManagement(request) },
  { name: 'management rate', phase: 'onRequest', hook: (o) => managementRate(o.limiter, o.rate) },
  { name: 'idempotency key read', phase: 'onRequest', hook: () => readIdempotencyKey },
  {
    name: '100-continue',
    phase: 'onRequest',
    hook: (_o, scope) => continueAfterChecks(scope.initialConfig.bodyLimit ?? 0),
  },
  // The body, read under its own deadline.
  {
    name: 'body deadline',
    phase: 'preParsing',
    hook: (o) =>
      bodyDeadline(o.bodyTimeoutMs ?? MANAGEMENT_BODY_TIMEOUT_MS, o.streamedBodyTimeoutMs ?? STREAMED_BODY_TIMEOUT_MS),
  },
  { name: 'idempotency fingerprint', phase: 'preParsing', hook: () => fingerprintBody },
  // Before validation: a repeated Idempotency-Key is answered here.
  { name: 'store deadline resumes', phase: 'preValidation', hook: () => resumeStoreDeadline },
  { name: 'idempotency claim or replay', phase: 'preValidation', hook: (o) => claimIdempotencyKey(o) },
  { name: 'idempotent answer kept', phase: 'onSend', hook: (o) => keepIdempotentAnswer(o) },
  { name: 'deadlines cleared', phase: 'onResponse', hook: () => clearDeadlines },
]

/** The management API's operations, in the order they are registered (the OpenAPI document's). */
export const MANAGEMENT_OPERATIONS: OperationTable<ManagementContext> = [
  ...SUB_ACCOUNT_COLLECTION_OPERATIONS,
  ...ACCOUNT_OPERATIONS,
  ...PROXIED_ROUTE_OPERATIONS,
  ...PLAN_OPERATIONS,
  ...SETTINGS_OPERATIONS,
  ...LIMIT_SIMULATION_OPERATIONS,
  ...USAGE_EXPORT_OPERATIONS,
  ...USAGE_RECONCILIATION_OPERATIONS,
  ...EVENT_OPERATIONS,
  ...REQUEST_OPERATIONS,
  ...WEBHOOK_ENDPOINT_OPERATIONS,
  ...WEBHOOK_DELIVERY_OPERATIONS,
  ...SUB_ACCOUNT_ITEM_OPERATIONS,
  ...KEY_OPERATIONS,
  ...KEY_IMPORT_OPERATIONS,
  ...KEY_LEAK_OPERATIONS,
  ...CREDIT_OPERATIONS,
  ...KEY_USAGE_OPERATIONS,
]

export const managementRoutes: FastifyPluginAsync<ManagementOptions> = async (plugin, options) => {
  const { sql, cache } = options
  plugin.decorateRequest('deadline', null)
  // A route that reads its body as a stream (config.streamedBody, a key import) gets it as it
  // comes; any other refuses ndjson as it refuses every type but JSON.
  plugin.addContentTypeParser('application/x-ndjson', (request, payload, done) => {
    if (request.routeOptions.config.streamedBody === true) return done(null, payload)
    done(unsupportedMediaType('application/json', request.headers['content-type']), undefined)
  })
  idempotencyRequests(plugin)
  for (const { phase, hook } of MANAGEMENT_HOOKS) plugin.addHook(phase as 'onRequest', hook(options, plugin) as never)
  startIdempotencySweep(plugin, {
    sql,
    encryptionKey: options.encryptionKey,
    sweepIntervalMs: options.idempotencySweepIntervalMs,
  })

  const context: ManagementContext = {
    sql: options.callSql ?? sql,
    reads: options.heavyReadSql ?? sql,
    cache,
    // The plain pool: the secret, read once, serves every call, whichever was first.
    cursors: new Cursors(() => cursorSecret(sql)),
    keyMinted: options.keyMinted,
    webhooks: {
      encryptionKey: options.encryptionKey,
      allowInsecure: options.webhooksAllowInsecure,
      lookup: options.webhookLookup,
      endpointsMax: options.webhookEndpointsMax ?? DEFAULT_WEBHOOK_ENDPOINTS_MAX,
    },
    requestLog: options.requestLog,
    ownerLookups: () => plugin.tenancyCache.lookups,
    portalIssuerUrl: options.portalIssuerUrl,
    routeStatuses: options.routeStatuses,
    usageExport: options.usageExport,
    keyImports: new KeyImportPlaces({
      answerStallMs: options.keyImportAnswerStallMs,
      spoolBytes: options.keyImportSpoolBytes,
    }),
  }
  registerOperations(plugin, MANAGEMENT_OPERATIONS, context)
  if (options.portalIssuerUrl !== null) registerOperations(plugin, PORTAL_SESSION_OPERATIONS, context)
}
