// buildApp: the Fastify options and the registrations, in order; it never listens (the process
// lives in main.ts). What it is given is in app-deps.ts, the server's limits in
// http/server-limits.ts. docs/internals.md follows a request through what is registered here.
import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyServerOptions,
} from 'fastify'
import type { AppDeps } from './app-deps.js'
import { AccessTokens } from './auth/access-tokens.js'
import { ConfigError } from './config.js'
import { keepForwardedAddresses } from './guardrails/caller-address.js'
import { consolePlugin } from './console/plugin.js'
import { portalPlugin } from './portal/plugin.js'
import { identityAssertions } from './identity/assertions.js'
import { Keyring } from './signing-keys/keyring.js'
import { oauthRoutes } from './oauth/routes.js'
import { credentialRoutes } from './oauth/jwks.js'
import { sendError, sendFrameworkError } from './http/error-handler.js'
import { deferContinue } from './http/expect-continue.js'
import { parseQueryString } from './http/query-string.js'
import { requestGuards } from './http/guards.js'
import { requestId } from './http/request-id.js'
import { refuseClientError } from './http/parser-refusal.js'
import { parsing } from './http/parsing.js'
import { routeKinds } from './http/route-kind.js'
import {
  HEADERS_TIMEOUT_MS,
  KEEP_ALIVE_TIMEOUT_MS,
  MANAGEMENT_BODY_LIMIT,
  hearUpgradeErrors,
  MAX_HEAD_BYTES,
  serverOptions,
} from './http/server-limits.js'
import { LogReads } from './management/log-reads.js'
import { managementRoutes } from './management/routes.js'
import { MANAGEMENT_PREFIX } from './shared/paths.js'
import { healthRoutes } from './ops/health.js'
import { lazyChildLogger } from './ops/logging.js'
import { registerOpenApi } from './ops/openapi.js'
import { metricsPlugin } from './ops/metrics-plugin.js'
import { readinessPlugin } from './ops/readiness-plugin.js'
import { requestAccounting } from './ops/request-accounting.js'
import { signingKeysPlugin } from './signing-keys/plugin.js'
import { tenancyCachePlugin } from './cache/plugin.js'
import { usageMeterPlugin } from './usage/meter-plugin.js'
import { eventRetentionPlugin } from './events/retention-plugin.js'
import { limitsPlugin } from './limits/plugin.js'
import { alertsPlugin } from './alerts/plugin.js'
import { requestLogPlugin } from './request-log/plugin.js'
import { webhookDeliveryPlugin } from './webhooks/delivery-plugin.js'
import { limitGate } from './proxy/limit-gate.js'
import { proxyRoutes } from './proxy/plugin.js'
import { loadRouteTable } from './proxy/route-table.js'
import { WebSocketRuntime } from './proxy/websocket/runtime.js'
import { defaultMaxWebSocketsPerAccount } from './proxy/websocket/route-options.js'

function isLoggerInstance(logger: AppDeps['logger']): logger is FastifyBaseLogger {
  return typeof logger === 'object' && logger !== null && typeof (logger as { child?: unknown }).child === 'function'
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The signing keys (signing-keys/keyring.ts). */
    keyring: Keyring
    /** Verifies and remembers access tokens (auth/access-tokens.ts), for the tenancy checks. */
    accessTokens: AccessTokens
  }
}

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const tuning = deps.tuning ?? {}
  // A bad route table stops the gateway before it opens anything.
  const routes = deps.routes ?? loadRouteTable(deps.config.gatewayConfig, deps.config.upstreamUrl, deps.config.console)
  // Stored signing keys need the key that opens them; a keyring of the caller's does not.
  const encryptionKey = deps.keyring === undefined ? deps.config.encryptionKey : undefined
  if (deps.keyring === undefined && encryptionKey === undefined)
    throw new ConfigError('ENCRYPTION_KEY', 'is required to load the signing keys')
  // Kept idempotent answers and webhook secrets are sealed under it too (management/).
  const answersKey = deps.config.encryptionKey
  if (answersKey === undefined) throw new ConfigError('ENCRYPTION_KEY', 'is required to keep idempotent answers')
  const logging = deps.logger !== undefined && deps.logger !== false
  const app = Fastify({
    frameworkErrors: sendFrameworkError,
    ...(isLoggerInstance(deps.logger)
      ? { loggerInstance: deps.logger }
      : { logger: (deps.logger ?? false) as FastifyServerOptions['logger'] }),
    // One line per request, written by requestAccounting, instead of fastify's two.
    logController: new LogController({ disableRequestLogging: true }),
    ...(logging ? { childLoggerFactory: lazyChildLogger } : {}),
    // Requests that arrive on an open connection while the gateway closes are served (with
    // Connection: close), not refused: a rolling deploy should fail no request.
    return503OnClosing: false,
    genReqId: requestId,
    // request.ip: the peer, or behind a trusted proxy the right-most X-Forwarded-For address not
    // among TRUSTED_PROXIES (proxy-addr). Nothing trusted by default.
    trustProxy: deps.config.trustedProxies.length === 0 ? false : [...deps.config.trustedProxies],
    clientErrorHandler: refuseClientError,
    bodyLimit: MANAGEMENT_BODY_LIMIT,
    // Refuse `{"__proto__": …}` and `{"constructor": {"prototype": …}}` outright.
    onProtoPoisoning: 'error',
    onConstructorPoisoning: 'error',
    // An id of any length reaches its route, whose handler answers 404 not_found: with a lower
    // limit, find-my-way skips the route and a catch-all proxy route takes the path instead (404
    // route_not_found). Only parameters of regex routes cost more when longer; the gateway has none.
    routerOptions: { ignoreTrailingSlash: false, maxParamLength: MAX_HEAD_BYTES, querystringParser: parseQueryString },
    http: serverOptions(tuning.headersTimeoutMs ?? HEADERS_TIMEOUT_MS),
    keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS,
  })
  // Past MAX_CONNECTIONS, Node closes a new connection as soon as it is accepted.
  app.server.maxConnections = deps.config.maxConnections
  // Only where a route takes WebSockets: elsewhere Node hands no upgrade over.
  if (routes.some((route) => route.websocket !== null)) hearUpgradeErrors(app.server)
  // Before anything reads request.ip: an X-Forwarded-For entry that is not an address is absent.
  if (deps.config.trustedProxies.length > 0) app.addHook('onRequest', keepForwardedAddresses)

  // No count at the parser: every field reaches the request guards, which refuse past 100 in
  // each route's shape (431: http/guards.ts; the token endpoint's is RFC 6749's). Past a count,
  // Node 20 drops the rest without a word (a second Authorization the single-header rule must
  // see), and Node 26, the image's, refuses on the socket before any route is known. The
  // parser's 16 KiB a head bounds the fields kept.
  app.server.maxHeadersCount = 0
  deferContinue(app)

  // Set by the tenancy checks of the management and proxy routes; read for every request's usage.
  app.decorateRequest('principal', null)
  app.decorateRequest('actingTenant', null)
  // A 401 for a key that exists (revoked, expired): its caller, for the request log only.
  app.decorateRequest('refusedKey', null)
  // Set by the error handler, and the proxy's admission step: read by the request log.
  app.decorateReply('problemCode', null)
  app.decorateRequest('routePrefix', '')
  // Filled by the signing-keys plugin below, before any route that signs is registered.
  const keyring = deps.keyring ?? new Keyring({ clock: tuning.signingKeys?.clock })
  app.decorate('keyring', keyring)

  await app.register(parsing)
  await app.register(routeKinds)
  // onClose hooks run last registered first: the meter writes its last counts before the cache
  // lets Redis go.
  await app.register(metricsPlugin, { store: deps.store, metrics: deps.metrics })
  await app.register(tenancyCachePlugin, {
    sql: deps.store.sql,
    redis: deps.config.redis,
    keyPrefix: deps.redisKeyPrefix ?? deps.config.redisKeyPrefix,
    timings: tuning.cacheTimings,
  })
  if (encryptionKey !== undefined) {
    try {
      await app.register(signingKeysPlugin, {
        sql: deps.store.sql,
        encryptionKey,
        rotationDays: deps.config.signingKeyRotationDays,
        reloadIntervalMs: tuning.signingKeys?.reloadIntervalMs,
      })
    } catch (err) {
      // A wrong ENCRYPTION_KEY: let go of what is open already (Redis) before the caller hears of it.
      await app.close()
      throw err
    }
  }
  const logStore = deps.requestLogStore ?? deps.store
  await app.register(requestLogPlugin, {
    sql: logStore.sql,
    // A real Postgres takes the rows as a binary COPY, on a connection of the writer's own.
    ...(logStore.openOwnConnection === undefined ? {} : { openCopyConnection: logStore.openOwnConnection }),
    retentionDays: deps.config.requestLogRetentionDays,
    ...tuning.requestLog,
  })
  await app.register(usageMeterPlugin, { sql: deps.store.sql, flushIntervalMs: tuning.usageFlushIntervalMs })
  await app.register(eventRetentionPlugin, {
    sql: deps.store.sql,
    retentionDays: deps.config.eventsRetentionDays,
    ...tuning.eventRetention,
  })
  await app.register(webhookDeliveryPlugin, {
    sql: deps.store.sql,
    encryptionKey: answersKey,
    schedule: deps.config.webhooksRetrySchedule,
    listen: !deps.store.embedded,
    ...tuning.webhookDelivery,
    delivery: { allowInsecure: deps.config.webhooksAllowInsecure, ...tuning.webhookDelivery?.delivery },
  })
  await app.register(limitsPlugin, {
    sql: deps.store.sql,
    redis: deps.config.redis,
    keyPrefix: deps.redisKeyPrefix ?? deps.config.redisKeyPrefix,
    timings: tuning.limitTimings,
  })
  await app.register(alertsPlugin, { sql: deps.store.sql, ...tuning.alerts })
  app.decorate(
    'accessTokens',
    new AccessTokens(keyring, {
      issuer: deps.config.issuerUrl,
      verifications: app.metrics.credentials.tokenVerifications,
    }),
  )
  await app.register(requestAccounting, { logRequests: logging })
  await app.register(readinessPlugin)
  await app.register(requestGuards)
  app.setErrorHandler(sendError)

  await registerOpenApi(app)
  const cache = app.tenancyCache
  await app.register(healthRoutes, { sql: deps.store.sql, cache, readiness: app.readiness })
  await app.register(credentialRoutes, { keyring })
  await app.register(oauthRoutes, {
    sql: deps.store.sql,
    keyring,
    issuerUrl: deps.config.issuerUrl,
    issuerUrlIsDefault: deps.config.issuerUrlIsDefault,
    ttlSeconds: deps.config.accessTokenTtlSeconds,
    signatures: app.metrics.credentials.signatures.accessToken,
    clientLookupCounts: {
      query: () => app.metrics.cache.storeLookups.postgres.inc(),
      clientIds: (n) => app.metrics.cache.postgresClientIds.inc(n),
    },
    bodyTimeoutMs: tuning.managementBodyTimeoutMs,
  })
  // The web console (CONSOLE=on): a page over the management API; off, its path is like any other.
  if (deps.config.console)
    await app.register(consolePlugin, {
      routes: routes.map(({ prefix, scopes, websocket, ...route }) => ({
        prefix,
        scopes,
        websocket: websocket && {
          ...websocket,
          maxPerAccount: websocket.maxPerAccount ?? defaultMaxWebSocketsPerAccount(deps.config.maxConnections),
        },
        public: route.public,
      })),
    })
  // One for the API and the portal: a parent's reads of its log at once are counted together.
  const requestLogReader = app.requestLog === null ? null : { sql: app.requestLogSql, reads: new LogReads() }
  await app.register(managementRoutes, {
    prefix: MANAGEMENT_PREFIX,
    sql: deps.store.sql,
    lookups: cache.lookups,
    cache,
    bodyTimeoutMs: tuning.managementBodyTimeoutMs,
    limiter: app.limiter,
    rate: deps.config.managementRate,
    encryptionKey: answersKey,
    webhooksAllowInsecure: deps.config.webhooksAllowInsecure,
    webhookEndpointsMax: deps.config.webhookEndpointsMax,
    idempotencySweepIntervalMs: tuning.idempotencySweepIntervalMs,
    webhookLookup: tuning.webhookLookup,
    requestLog: requestLogReader,
    keyMinted: app.alerts.keyMinted,
    portalIssuerUrl: deps.config.console ? deps.config.issuerUrl : null,
  })
  // The sub-account portal comes with the console: its page and its API (portal/plugin.ts).
  if (deps.config.console)
    await app.register(portalPlugin, {
      sql: deps.store.sql,
      cache,
      requestLog: requestLogReader,
      keyMinted: app.alerts.keyMinted,
      issuerUrl: deps.config.issuerUrl,
      limiter: app.limiter,
      rate: deps.config.managementRate,
      lookupCounts: {
        query: () => app.metrics.cache.storeLookups.postgres.inc(),
        credentials: (n) => app.metrics.cache.postgresPortalCredentials.inc(n),
      },
    })
  const webSockets = routes.some((route) => route.websocket !== null)
    ? new WebSocketRuntime({
        lookups: cache.lookups,
        log: app.log,
        account: app.accountRequest,
        signingKeys: keyring,
        maxConnections: deps.config.maxConnections,
      })
    : null
  if (webSockets !== null) {
    // Revocation reaches open sockets through the bus that clears the caches (proxy/websocket/revocation.ts).
    cache.onEvict(webSockets.evicted)
    app.metrics.proxy.openWebSockets = (route) => webSockets.sockets.openOn(route)
    for (const route of routes) if (route.websocket !== null) app.metrics.proxy.webSocketRoutes.push(route.prefix)
  }
  await app.register(proxyRoutes, {
    routes,
    webSockets,
    lookups: cache.lookups,
    upstreamDuration: app.metrics.proxy.upstreamDuration,
    recentAdmissions: app.metrics.proxy.recentAdmissions,
    clientAborts: app.metrics.proxy.clientAborts,
    upstreamSlots: app.metrics.proxy.upstreamSlots,
    limits: limitGate({
      limiter: app.limiter,
      meter: app.usageMeter,
      metrics: app.metrics.limits,
      rateAlerts: app.alerts.rate,
    }),
    identity: routes.some((route) => route.identity !== null)
      ? identityAssertions({ keyring, issuer: deps.config.issuerUrl, metrics: app.metrics.credentials, cache })
      : null,
    consoleServed: deps.config.console,
  })

  return app
}
