// The management API under /v1/sub-accounts (docs/api.md). Parent keys only, acting as themselves.
// This plugin gives every route its hooks; the routes live in a file per resource beside it.
import type { Alerts } from '../alerts/plugin.js'
import type { FastifyPluginAsync } from 'fastify'
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox'
import type { CacheInvalidator } from '../cache/index.js'
import { continueAfterChecks } from '../http/expect-continue.js'
import type { Rate } from '../limits/bucket.js'
import type { Limiter } from '../limits/limiter.js'
import type { Sql } from '../store/db.js'
import { cursorSecret } from '../store/secrets.js'
import { tenancyHook } from '../tenancy/hook.js'
import type { TenancyLookups } from '../shared/tenancy-records.js'
import { registerAccountRoutes } from './account-routes.js'
import { authorizeManagement, type ManagementContext } from './common.js'
import { registerEventRoutes } from './event-routes.js'
import type { RequestLogReader } from './log-reads.js'
import { registerRequestRoutes } from './request-routes.js'
import { addManagementDeadline, markManagementRoutes } from './hooks.js'
import { addIdempotency } from './idempotency.js'
import { registerKeyRoutes } from './key-routes.js'
import { registerKeyUsageRoutes } from './key-usage-routes.js'
import { registerPortalSessionRoutes } from './portal-session-routes.js'
import { Cursors } from './paging.js'
import { managementRate } from '../limits/management-rate.js'
import { registerSubAccountCollection, registerSubAccountItem } from './sub-account-routes.js'
import { registerWebhookDeliveryRoutes } from './webhook-delivery-routes.js'
import { registerWebhookEndpointRoutes } from './webhook-endpoint-routes.js'
import type { LookupAll } from '../webhooks/url-policy.js'
import { DEFAULT_WEBHOOK_ENDPOINTS_MAX } from './webhook-endpoint-admission.js'

export interface ManagementOptions {
  sql: Sql
  lookups: TenancyLookups
  /** Told the cache entries a committed change made stale (docs/internals.md, caches). */
  cache: CacheInvalidator
  bodyTimeoutMs?: number // how long a body may take to arrive (hooks.ts)
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
}

export const managementRoutes: FastifyPluginAsync<ManagementOptions> = async (plugin, options) => {
  const { sql, lookups, cache } = options
  const app = plugin.withTypeProvider<TypeBoxTypeProvider>()
  markManagementRoutes(plugin)
  addManagementDeadline(plugin, options.bodyTimeoutMs)
  app.addHook('onRequest', tenancyHook(lookups))
  app.addHook('onRequest', async (request) => authorizeManagement(request))
  app.addHook('onRequest', managementRate(options.limiter, options.rate))
  addIdempotency(plugin, {
    sql,
    encryptionKey: options.encryptionKey,
    sweepIntervalMs: options.idempotencySweepIntervalMs,
  })
  app.addHook('onRequest', continueAfterChecks(plugin.initialConfig.bodyLimit ?? 0))

  const context: ManagementContext = {
    sql,
    cache,
    cursors: new Cursors(() => cursorSecret(sql)),
    keyMinted: options.keyMinted,
    webhooks: {
      encryptionKey: options.encryptionKey,
      allowInsecure: options.webhooksAllowInsecure,
      lookup: options.webhookLookup,
      endpointsMax: options.webhookEndpointsMax ?? DEFAULT_WEBHOOK_ENDPOINTS_MAX,
    },
  }
  registerSubAccountCollection(app, context)
  registerAccountRoutes(app, context)
  registerEventRoutes(app, context)
  registerRequestRoutes(app, context, options.requestLog)
  registerWebhookEndpointRoutes(app, context)
  registerWebhookDeliveryRoutes(app, context)
  registerSubAccountItem(app, context)
  registerKeyRoutes(app, context)
  registerKeyUsageRoutes(app, context)
  if (options.portalIssuerUrl !== null) registerPortalSessionRoutes(app, context, options.portalIssuerUrl)
}
