// What buildApp (app.ts) checks and sets before any plugin: the route table and keys it needs,
// the Fastify options, and the server's settings and first hooks.
import type {
  FastifyBaseLogger,
  FastifyHttpOptions,
  FastifyInstance,
  FastifyServerOptions,
  RawServerDefault,
} from 'fastify'
import { LogController } from 'fastify'
import type { AppDeps } from './app-deps.js'
import { ConfigError } from './config.js'
import { keepForwardedAddresses } from './guardrails/caller-address.js'
import { sendFrameworkError } from './http/error-handler.js'
import { deferContinue } from './http/expect-continue.js'
import { refuseClientError, refuseConnect } from './http/parser-refusal.js'
import { parseQueryString } from './http/query-string.js'
import { requestId } from './http/request-id.js'
import {
  HEADERS_TIMEOUT_MS,
  hearUpgradeErrors,
  KEEP_ALIVE_TIMEOUT_MS,
  limitConnections,
  MANAGEMENT_BODY_LIMIT,
  MAX_HEAD_BYTES,
  serverOptions,
} from './http/server-limits.js'
import { lazyChildLogger } from './ops/logging.js'
import type { ProxyRoute } from './proxy/route.js'
import { loadRouteTable } from './proxy/route-table.js'

function isLoggerInstance(logger: AppDeps['logger']): logger is FastifyBaseLogger {
  return typeof logger === 'object' && logger !== null && typeof (logger as { child?: unknown }).child === 'function'
}

/** What buildApp checks before it opens anything. */
export interface CheckedDeps {
  routes: readonly ProxyRoute[]
  /** The key that opens the stored signing keys; undefined when the caller hands a keyring. */
  signingKeysKey: Buffer | undefined
  /** ENCRYPTION_KEY: kept idempotent answers and webhook secrets are sealed under it (management/). */
  answersKey: Buffer
}

/** The route table (a bad one stops the gateway before it opens anything) and the keys. */
export function checkDeps(deps: AppDeps): CheckedDeps {
  const routes = deps.routes ?? loadRouteTable(deps.config.gatewayConfig, deps.config.upstreamUrl, deps.config.console)
  // Stored signing keys need the key that opens them; a keyring of the caller's does not.
  const signingKeysKey = deps.keyring === undefined ? deps.config.encryptionKey : undefined
  if (deps.keyring === undefined && signingKeysKey === undefined)
    throw new ConfigError('ENCRYPTION_KEY', 'is required to load the signing keys')
  const answersKey = deps.config.encryptionKey
  if (answersKey === undefined) throw new ConfigError('ENCRYPTION_KEY', 'is required to keep idempotent answers')
  return { routes, signingKeysKey, answersKey }
}

/** True when the app writes its own lines (request accounting) and child loggers are wanted. */
export const logging = (deps: AppDeps) => deps.logger !== undefined && deps.logger !== false

export function fastifyOptions(deps: AppDeps): FastifyHttpOptions<RawServerDefault, FastifyBaseLogger> {
  return {
    frameworkErrors: sendFrameworkError,
    ...(isLoggerInstance(deps.logger)
      ? { loggerInstance: deps.logger }
      : { logger: (deps.logger ?? false) as FastifyServerOptions['logger'] }),
    // One line per request, written by requestAccounting, instead of fastify's two.
    logController: new LogController({ disableRequestLogging: true }),
    ...(logging(deps) ? { childLoggerFactory: lazyChildLogger } : {}),
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
    http: serverOptions(deps.tuning?.headersTimeoutMs ?? HEADERS_TIMEOUT_MS),
    keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS,
  }
}

/** The server's settings and the hooks that come before anything else. */
export function configureServer(app: FastifyInstance, deps: AppDeps, routes: readonly ProxyRoute[]): void {
  // At MAX_CONNECTIONS, a new connection closes idle keep-alive ones to make room, else it is closed.
  limitConnections(app.server, deps.config.maxConnections)
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
  refuseConnect(app.server)
  // Set by the tenancy checks of the management and proxy routes; read for every request's usage.
  app.decorateRequest('principal', null)
  app.decorateRequest('actingTenant', null)
  // A 401 for a key that exists (revoked, expired): its caller, for the request log only.
  app.decorateRequest('refusedKey', null)
  // Set by the error handler, and the proxy's admission step: read by the request log.
  app.decorateReply('problemCode', null)
  app.decorateRequest('routePrefix', '')
  app.decorateRequest('routeCost', 1)
}
