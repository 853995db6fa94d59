// What buildApp (app.ts) hands each registration, one named function a feature: each plugin's
// options from AppDeps and the decorations registered before it (the Fastify options and the
// server's settings are app-server.ts's). Apart from app.ts so that buildApp reads as the order of
// registration.
import { routeStatuses } from './proxy/route-status.js'
import type { FastifyInstance } from 'fastify'
import { GitHubKeys } from './secret-scanning/github-keys.js'
import type { SecretScanningOptions } from './secret-scanning/routes.js'
import type { AppDeps } from './app-deps.js'
import { logging } from './app-server.js'
import { AccessTokens } from './auth/access-tokens.js'
import { identityAssertions } from './identity/assertions.js'
import { SIMULATION_THREAD_FROM_RECORDS } from './limits/replay-thread.js'
import { SIMULATION_MAX_SUB_ACCOUNTS } from './limits/simulation.js'
import { LogReads, type RequestLogReader } from './management/log-reads.js'
import type { ManagementOptions } from './management/routes.js'
import { RECONCILIATION_MAX_ROWS } from './management/usage-reconciliation-routes.js'
import { MANAGEMENT_PREFIX } from './shared/paths.js'
import type { ConsoleOptions } from './console/plugin.js'
import type { PortalOptions } from './portal/plugin.js'
import { limitGate } from './proxy/limit-gate.js'
import { badReportCounter, ejectionCounter, retryCounters } from './proxy/metrics.js'
import type { ProxyOptions } from './proxy/options.js'
import type { ProxyRoute } from './proxy/route.js'
import { defaultMaxWebSocketsPerAccount } from './proxy/websocket/route-options.js'
import { WebSocketRuntime } from './proxy/websocket/runtime.js'
import { cancellable } from './store/call-statements.js'
import type { Store } from './store/db.js'
import { storeDeadlinesOf } from './store/deadlines.js'
import { TRACE_FLUSH_BOUND_MS, type TracesOptions } from './traces/plugin.js'
import { exportTarget } from './usage/exporter.js'

export const metricsOptions = (deps: AppDeps) => ({ store: deps.store, metrics: deps.metrics })

/** Tracing's settings (null: off), and how long the stop waits for the last spans. */
export const tracesOptions = (deps: AppDeps): TracesOptions => ({
  settings: deps.config.traces,
  flushBoundMs: deps.tuning?.traceFlushBoundMs ?? TRACE_FLUSH_BOUND_MS,
})

/** The Redis the tenancy cache and the limiter share, and its key prefix. */
const redisOf = (deps: AppDeps) => ({
  // The lookups' own connections: a flood of heavy reads never holds up a key's first request.
  sql: deps.store.lookupSql ?? deps.store.sql,
  redis: deps.config.redis,
  keyPrefix: deps.redisKeyPrefix ?? deps.config.redisKeyPrefix,
})

export const cacheOptions = (deps: AppDeps) => ({ ...redisOf(deps), timings: deps.tuning?.cacheTimings })

export const limitsOptions = (deps: AppDeps) => ({
  ...redisOf(deps),
  timings: deps.tuning?.limitTimings,
  warmWaitMs: deps.tuning?.limitWarmWaitMs,
})

export function signingKeysOptions(deps: AppDeps, encryptionKey: Buffer) {
  return {
    sql: deps.store.sql,
    encryptionKey,
    rotationDays: deps.config.signingKeyRotationDays,
    reloadIntervalMs: deps.tuning?.signingKeys?.reloadIntervalMs,
  }
}

export function requestLogOptions(deps: AppDeps) {
  const logStore = deps.requestLogStore ?? deps.store
  return {
    sql: logStore.sql,
    // A real Postgres takes the rows as a binary COPY, on a connection of the writer's own.
    ...(logStore.openOwnConnection === undefined ? {} : { openCopyConnection: logStore.openOwnConnection }),
    retentionDays: deps.config.requestLogRetentionDays,
    ...deps.tuning?.requestLog,
  }
}

export const usageMeterOptions = (deps: AppDeps) => ({
  sql: deps.store.sql,
  // A real Postgres takes the meter's writes on a connection of its own, ended when one hangs.
  openConnection: deps.store.openOwnConnection,
  flushIntervalMs: deps.tuning?.usageFlushIntervalMs,
  periodSeconds: deps.config.usagePeriodSeconds,
  closeGraceSeconds: deps.config.usageCloseGraceSeconds,
  closeIntervalMs: deps.tuning?.usagePeriods?.closeIntervalMs,
  liveReplicaSeconds: deps.tuning?.usagePeriods?.liveReplicaSeconds,
  clock: deps.tuning?.usagePeriods?.clock,
  push:
    deps.config.usageExport === null
      ? null
      : {
          ...deps.config.usageExport,
          source: deps.config.issuerUrl,
          retrySchedule: deps.config.webhooksRetrySchedule,
          intervalMs: deps.tuning?.usagePeriods?.exportIntervalMs,
          leaseSeconds: deps.tuning?.usagePeriods?.exportLeaseSeconds,
        },
})

export const alertsOptions = (deps: AppDeps) => ({ sql: deps.store.sql, ...deps.tuning?.alerts })

/** Each request's line (with a logger), metrics, usage and request-log record. */
export const accountingOptions = (deps: AppDeps) => ({ logRequests: logging(deps) })

/** /healthz and /readyz: the store, the cache's Redis and the drain. */
export const healthOptions = (app: FastifyInstance, deps: AppDeps) => ({
  sql: deps.store.sql,
  probeSql: deps.store.lookupSql ?? deps.store.sql,
  cache: app.tenancyCache,
  readiness: app.readiness,
})

/** The JWKS and the authorization server's metadata: the keyring's public keys. */
export const credentialOptions = (app: FastifyInstance) => ({ keyring: app.keyring })

export function eventRetentionOptions(deps: AppDeps) {
  return { sql: deps.store.sql, retentionDays: deps.config.eventsRetentionDays, ...deps.tuning?.eventRetention }
}

export function webhookDeliveryOptions(deps: AppDeps, encryptionKey: Buffer) {
  const tuning = deps.tuning?.webhookDelivery
  return {
    sql: deps.store.sql,
    encryptionKey,
    schedule: deps.config.webhooksRetrySchedule,
    listen: !deps.store.embedded,
    ...tuning,
    delivery: { allowInsecure: deps.config.webhooksAllowInsecure, ...tuning?.delivery },
  }
}

/** The verifier of access tokens the tenancy check uses (app.accessTokens). */
export function accessTokens(app: FastifyInstance, deps: AppDeps): AccessTokens {
  return new AccessTokens(app.keyring, {
    issuer: deps.config.issuerUrl,
    verifications: app.metrics.credentials.tokenVerifications,
  })
}

export function oauthOptions(app: FastifyInstance, deps: AppDeps) {
  return {
    sql: deps.store.sql,
    keyring: app.keyring,
    issuerUrl: deps.config.issuerUrl,
    issuerUrlIsDefault: deps.config.issuerUrlIsDefault,
    ttlSeconds: deps.config.accessTokenTtlSeconds,
    signatures: app.metrics.credentials.signatures.accessToken,
    clientLookupCounts: {
      query: () => app.metrics.cache.storeLookups.postgres.inc(),
      clientIds: (n: number) => app.metrics.cache.postgresClientIds.inc(n),
    },
    bodyTimeoutMs: deps.tuning?.managementBodyTimeoutMs,
  }
}

/** GitHub's secret scanning endpoint: its keys' URL, and the revocation path of the management API. */
export function secretScanningOptions(app: FastifyInstance, deps: AppDeps): SecretScanningOptions {
  return {
    sql: callSql(deps.store),
    cache: app.tenancyCache,
    keys: new GitHubKeys({ url: deps.config.secretScanningKeysUrl }),
    bodyTimeoutMs: deps.tuning?.managementBodyTimeoutMs,
  }
}

/** What the console's page lists of the route table. */
export function consoleOptions(deps: AppDeps, routes: readonly ProxyRoute[]): ConsoleOptions {
  return {
    routes: routes.map(({ prefix, scopes, websocket, cors, ...route }) => ({
      prefix,
      scopes,
      cors: cors && { origins: cors.originList },
      websocket: websocket && {
        ...websocket,
        maxPerAccount: websocket.maxPerAccount ?? defaultMaxWebSocketsPerAccount(deps.config.maxConnections),
      },
      public: route.public,
      decided: route.upstream === null ? 'only' : deps.config.authzPort === null ? null : 'also',
    })),
    traceUrlTemplate: deps.config.traceUrlTemplate,
  }
}

/**
 * A store's heavy reads' pool, its statements cancelled when their call is stopped
 * (management/heavy-reads.ts); none for the embedded database, whose one connection a cancel
 * could not reach.
 */
const cancellableReads = (store: Store) =>
  store.heavyReadSql === undefined ? undefined : cancellable(store.heavyReadSql)

/**
 * A store's main pool as the management API's and the portal's calls use it: their statements
 * are cancelled when the call is answered 503 at its store deadline (management/hooks.ts,
 * dropLateAnswers). The embedded database's one connection as it is: a cancel could not reach it.
 */
const callSql = (store: Store) => (store.embedded ? store.sql : cancellable(store.sql))

/** One for the API and the portal: a parent's reads of its log at once are counted together. */
export function requestLogReader(app: FastifyInstance, deps: AppDeps): RequestLogReader | null {
  if (app.requestLog === null) return null
  return {
    // The heavy reads' own pool, whose statements stop with their call (management/heavy-reads.ts).
    sql: cancellableReads(deps.requestLogStore ?? deps.store) ?? app.requestLogSql,
    reads: new LogReads(),
    statementTimeoutMs: storeDeadlinesOf(app).managementMs,
    copies: !(deps.requestLogStore ?? deps.store).embedded,
    retentionDays: deps.config.requestLogRetentionDays,
    replayThreadFromRecords: deps.tuning?.simulationThreadFromRecords ?? SIMULATION_THREAD_FROM_RECORDS,
    simulationMaxSubAccounts: deps.tuning?.simulationMaxSubAccounts ?? SIMULATION_MAX_SUB_ACCOUNTS,
  }
}

export function managementOptions(
  app: FastifyInstance,
  deps: AppDeps,
  answersKey: Buffer,
  requestLog: RequestLogReader | null,
  routes: readonly ProxyRoute[],
): ManagementOptions & { prefix: string } {
  return {
    prefix: MANAGEMENT_PREFIX,
    sql: deps.store.sql,
    callSql: callSql(deps.store),
    heavyReadSql: cancellableReads(deps.store),
    lookups: app.tenancyCache.lookups,
    cache: app.tenancyCache,
    bodyTimeoutMs: deps.tuning?.managementBodyTimeoutMs,
    streamedBodyTimeoutMs: deps.tuning?.managementStreamedBodyTimeoutMs,
    limiter: app.limiter,
    rate: deps.config.managementRate,
    encryptionKey: answersKey,
    webhooksAllowInsecure: deps.config.webhooksAllowInsecure,
    webhookEndpointsMax: deps.config.webhookEndpointsMax,
    idempotencySweepIntervalMs: deps.tuning?.idempotencySweepIntervalMs,
    webhookLookup: deps.tuning?.webhookLookup,
    requestLog,
    keyMinted: app.alerts.keyMinted,
    portalIssuerUrl: deps.config.console ? deps.config.issuerUrl : null,
    // The proxy fills the map as it registers its routes, after this: it is read when a call comes.
    routeStatuses: () => routeStatuses(routes, app.metrics.proxy.upstreamTargets),
    usageExport: {
      periodSeconds: deps.config.usagePeriodSeconds,
      source: deps.config.issuerUrl,
      pushTarget: deps.config.usageExport === null ? null : exportTarget(deps.config.usageExport.url),
      reconciliationMaxRows: deps.tuning?.reconciliationMaxRows ?? RECONCILIATION_MAX_ROWS,
    },
  }
}

export function portalOptions(deps: AppDeps, requestLog: RequestLogReader | null): PortalOptions {
  return {
    sql: deps.store.sql,
    callSql: callSql(deps.store),
    requestLog,
    issuerUrl: deps.config.issuerUrl,
    rate: deps.config.managementRate,
  }
}

/** The open WebSockets, when a route takes them: told of revocations, counted in the metrics. */
function webSocketRuntime(app: FastifyInstance, deps: AppDeps, routes: readonly ProxyRoute[]) {
  if (!routes.some((route) => route.websocket !== null)) return null
  const cache = app.tenancyCache
  const webSockets = new WebSocketRuntime({
    lookups: cache.lookups,
    log: app.log,
    account: app.accountRequest,
    signingKeys: app.keyring,
    maxConnections: deps.config.maxConnections,
  })
  // Revocation reaches open sockets through the bus that clears the caches (proxy/websocket/revocation.ts).
  cache.onEvict(webSockets.evicted)
  app.metrics.proxy.openWebSockets = (route) => webSockets.sockets.openOn(route)
  for (const route of routes) if (route.websocket !== null) app.metrics.proxy.webSocketRoutes.push(route.prefix)
  return webSockets
}

export function proxyOptions(app: FastifyInstance, deps: AppDeps, routes: readonly ProxyRoute[]): ProxyOptions {
  const { metrics, tenancyCache: cache } = app
  return {
    routes,
    webSockets: webSocketRuntime(app, deps, routes),
    lookups: cache.lookups,
    upstreamDuration: metrics.proxy.upstreamDuration,
    recentAdmissions: metrics.proxy.recentAdmissions,
    clientAborts: metrics.proxy.clientAborts,
    account: app.accountRequest,
    meterBadReport: badReportCounter(metrics.proxy, routes),
    upstreamSlots: metrics.proxy.upstreamSlots,
    upstreamTargets: metrics.proxy.upstreamTargets,
    upstreamEjections: ejectionCounter(metrics.proxy, routes),
    upstreamRetries: retryCounters(metrics.proxy, routes),
    upstreamClock: deps.tuning?.upstreamClock,
    limits: limitGate({
      limiter: app.limiter,
      meter: app.usageMeter,
      metrics: metrics.limits,
      rateAlerts: app.alerts.rate,
    }),
    identity: routes.some((route) => route.identity !== null)
      ? identityAssertions({ keyring: app.keyring, issuer: deps.config.issuerUrl, metrics: metrics.credentials, cache })
      : null,
    consoleServed: deps.config.console,
  }
}
