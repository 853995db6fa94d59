// What buildApp (app.ts) hands the surfaces clients and operators call (app-options.ts has the
// rest): the token endpoint, GitHub's secret scanning, the console, the management API and the
// portal, and the request log's reader they share; with the pools their calls' statements run on.
import type { FastifyInstance } from 'fastify'
import type { AppDeps } from './app-deps.js'
import type { ConsoleOptions } from './console/plugin.js'
import { SIMULATION_THREAD_FROM_RECORDS } from './limits/replay-thread.js'
import { SIMULATION_MAX_SUB_ACCOUNTS } from './limits/simulation.js'
import { LogReads, type RequestLogReader } from './management/log-reads.js'
import type { ManagementOptions } from './management/routes.js'
import { RECONCILIATION_MAX_ROWS } from './management/usage-reconciliation-routes.js'
import type { PortalOptions } from './portal/plugin.js'
import type { ProxyRoute } from './proxy/route.js'
import { routeStatuses } from './proxy/route-status.js'
import { defaultMaxWebSocketsPerAccount } from './proxy/websocket/route-options.js'
import { GitHubKeys } from './secret-scanning/github-keys.js'
import type { SecretScanningOptions } from './secret-scanning/routes.js'
import { MANAGEMENT_PREFIX } from './shared/paths.js'
import { cancellable } from './store/call-statements.js'
import type { Store } from './store/db.js'
import { storeDeadlinesOf } from './store/deadlines.js'
import { exportTarget } from './usage/exporter.js'

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
    keyImportAnswerStallMs: deps.tuning?.keyImportAnswerStallMs,
    keyImportSpoolBytes: deps.tuning?.keyImportSpoolBytes,
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
