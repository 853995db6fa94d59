// buildApp: registers plugins and routes, never listens (the process lives in main.ts).
import { randomUUID } from 'node:crypto'
import { STATUS_CODES } from 'node:http'
import type { Duplex } from 'node:stream'
import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
  type FastifyServerOptions,
} from 'fastify'
import { Ajv, type Options as AjvOptions } from 'ajv'
import addFormats from 'ajv-formats'
import type { Config } from './config.js'
import { ApiError, ERRORS, problem, PROBLEM_CONTENT_TYPE, routeNotFound, validationFailed, type ErrorCode, type FieldError } from './errors.js'
import { TenancyCache, type CacheTimings } from './cache/tiered.js'
import { MANAGEMENT_PREFIX, managementRoutes } from './management/routes.js'
import { healthRoutes } from './ops/health.js'
import { lazyChildLogger, logRequest } from './ops/logging.js'
import { createMetrics, type Metrics, type RouteKind } from './ops/metrics.js'
import { registerOpenApi } from './ops/openapi.js'
import { isBadPath, pathOf } from './proxy/paths.js'
import { proxyRoutes, type ProxiedRouteConfig } from './proxy/plugin.js'
import { loadRouteTable, type ProxyRoute } from './proxy/routes.js'
import { within, type Store } from './store/db.js'
import { singleHeaderCounts } from './tenancy/hook.js'
import { postgresLookups } from './tenancy/lookups.js'
import { UsageMeter } from './usage/meter.js'

export interface AppDeps {
  config: Config
  store: Store
  /** The route table; by default the one in `config`, validated here. */
  routes?: readonly ProxyRoute[]
  /** Overrides REDIS_KEY_PREFIX (tests use one prefix per file). */
  redisKeyPrefix?: string
  cacheTimings?: Partial<CacheTimings>
  /** How often the usage meter writes to Postgres. */
  usageFlushIntervalMs?: number
  metrics?: Metrics
  /** A pino logger configuration, or an instance (tests capture the stream); false for none. */
  logger?: FastifyServerOptions['logger'] | FastifyBaseLogger | false
}

declare module 'fastify' {
  interface FastifyInstance {
    tenancyCache: TenancyCache
    usageMeter: UsageMeter
    metrics: Metrics
  }
}

/** How long a management call may take before it is answered 503 store_unavailable. */
export const MANAGEMENT_DEADLINE_MS = 1_500

/** Management bodies are small JSON documents; proxied bodies get their own limit. */
export const MANAGEMENT_BODY_LIMIT = 64 * 1024

const SANE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/

/** Keeps the client's X-Request-Id when it is a sane token, so logs can be joined across hops. */
function requestId(req: { headers: Record<string, string | string[] | undefined> }): string {
  const given = req.headers['x-request-id']
  return typeof given === 'string' && SANE_REQUEST_ID.test(given) ? given : randomUUID()
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The management deadline's timer, cleared when the response is done. */
    deadline: NodeJS.Timeout | null
  }
  interface FastifyContextConfig {
    /** Which part of the gateway a route belongs to, for the request line and the metrics. */
    kind?: RouteKind
  }
}

function isLoggerInstance(logger: AppDeps['logger']): logger is FastifyBaseLogger {
  return typeof logger === 'object' && logger !== null && typeof (logger as { child?: unknown }).child === 'function'
}

// Bodies are validated without coercion (a number is not a name); the query string and path
// are text, so there numbers and booleans are coerced. Unknown fields are errors, never dropped.
const BASE_AJV: AjvOptions = { allErrors: true, removeAdditional: false, useDefaults: true, strict: false }

function makeAjv(coerceTypes: boolean): Ajv {
  const ajv = new Ajv({ ...BASE_AJV, coerceTypes })
  addFormats.default(ajv)
  return ajv
}

interface AjvErrorLike {
  instancePath: string
  message?: string
  keyword: string
  params: Record<string, unknown>
}

function fieldErrors(context: string, errors: AjvErrorLike[]): FieldError[] {
  return errors.map((e) => {
    let path = `/${context}${e.instancePath}`
    if (e.keyword === 'required') path += `/${String(e.params.missingProperty)}`
    if (e.keyword === 'additionalProperties') {
      return { path: `${path}/${String(e.params.additionalProperty)}`, message: 'is not a known field' }
    }
    return { path, message: e.message ?? 'is invalid' }
  })
}

/** Fastify's own errors, by code, mapped onto the catalogue. */
const FASTIFY_ERRORS: Record<string, ErrorCode> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'unsupported_media_type',
  FST_ERR_CTP_BODY_TOO_LARGE: 'payload_too_large',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'bad_request',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'invalid_json',
  FST_ERR_BAD_URL: 'bad_request',
  // A path segment too long to be an id: the id it would name does not exist.
  FST_ERR_MAX_PARAM_LENGTH: 'not_found',
}

// postgres.js and socket errors that mean the database cannot be reached right now.
const STORE_UNREACHABLE = new Set([
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'CONNECT_TIMEOUT',
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  '53300', // too_many_connections
  '57P01', // admin_shutdown
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now
  'QUERY_TIMEOUT', // a lookup past its deadline (store/db.ts within)
])

function isStoreUnreachable(code: string): boolean {
  // SQLSTATE class 08: connection exceptions.
  return STORE_UNREACHABLE.has(code) || /^08[0-9A-Z]{3}$/.test(code)
}

function toApiError(err: FastifyError): ApiError | null {
  if (err instanceof ApiError) return err
  if (err.code && isStoreUnreachable(err.code)) return new ApiError('store_unavailable', 'the store cannot be reached; try again')
  if (err.validation) return validationFailed(fieldErrors(err.validationContext ?? 'body', err.validation as AjvErrorLike[]))
  const code = err.code ? FASTIFY_ERRORS[err.code] : undefined
  if (code) return new ApiError(code, err.message)
  // Any other client error fastify raises (a bad header, say) keeps its status class.
  if (typeof err.statusCode === 'number' && err.statusCode >= 400 && err.statusCode < 500) {
    return new ApiError('bad_request', err.message)
  }
  return null
}

/** The one way an error leaves the gateway: problem+json, and no internals on a 5xx. */
function sendError(err: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const apiError = toApiError(err)
  if (apiError === null) {
    request.log.error({ err }, 'unhandled error')
    return reply
      .code(500)
      .type(PROBLEM_CONTENT_TYPE)
      .send(problem('internal_error', 'the gateway could not complete this request', request.id))
  }
  if (apiError.status >= 500) request.log.error({ err }, apiError.code)
  if (apiError.options.headers) reply.headers(apiError.options.headers)
  return reply
    .code(apiError.status)
    .type(PROBLEM_CONTENT_TYPE)
    .send(problem(apiError.code, apiError.detail, request.id, apiError.options.errors))
}

/** This process's connections by state, as Postgres reports them (the scrape's own included). */
async function connectionsByState(store: Store): Promise<Record<string, number> | null> {
  const pool = store.pool
  if (pool === undefined) return null
  const rows = await within(
    store.sql<{ state: string | null; n: number }[]>`
      select state, count(*)::int as n from pg_stat_activity
      where application_name = ${pool.applicationName} group by state`,
    1000,
  )
  return Object.fromEntries(rows.map((row) => [row.state ?? 'unknown', row.n]))
}

/**
 * Requests Node's HTTP parser refuses (a head over 16 KiB, bad framing, a bare LF…) never reach
 * fastify's routing: they are answered here, on the socket, in the same problem+json envelope,
 * and the connection is closed (its framing can no longer be trusted).
 */
function refuseClientError(this: FastifyInstance, err: NodeJS.ErrnoException, socket: Duplex): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return
  const code: ErrorCode =
    err.code === 'HPE_HEADER_OVERFLOW' ? 'headers_too_large' : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 'request_timeout' : 'bad_request'
  const detail =
    code === 'headers_too_large'
      ? 'the request head is larger than 16 KiB'
      : code === 'request_timeout'
        ? 'the request was not received in time'
        : 'the request is not valid HTTP/1.1'
  const requestId = randomUUID()
  this.log.debug({ err, reqId: requestId }, 'refused by the HTTP parser')
  if (socket.writable) {
    const body = JSON.stringify(problem(code, detail, requestId))
    const status = ERRORS[code].status
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: ${PROBLEM_CONTENT_TYPE}\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nX-Request-Id: ${requestId}\r\nConnection: close\r\n\r\n${body}`,
    )
  }
  socket.destroy(err)
}

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  // A bad route table stops the gateway before it opens anything.
  const routes = deps.routes ?? loadRouteTable(deps.config.gatewayConfig, deps.config.upstreamUrl)
  const logging = deps.logger !== undefined && deps.logger !== false
  const app = Fastify({
    // Errors the router raises before any route runs (a bad percent-encoding, an overlong
    // segment) take the same way out as every other error.
    frameworkErrors: (err, request, reply) => {
      // No route matched yet, so the onSend hook below does not run for this reply.
      reply.header('x-request-id', request.id)
      sendError(err, request, reply)
    },
    ...(isLoggerInstance(deps.logger)
      ? { loggerInstance: deps.logger }
      : { logger: (deps.logger ?? false) as FastifyServerOptions['logger'] }),
    // One line per request, written by logRequest below, instead of fastify's two.
    logController: new LogController({ disableRequestLogging: true }),
    ...(logging ? { childLoggerFactory: lazyChildLogger } : {}),
    // Requests that arrive on an open connection while the gateway closes are served (with
    // Connection: close), not refused: a rolling deploy should fail no request.
    return503OnClosing: false,
    genReqId: requestId,
    clientErrorHandler: refuseClientError,
    bodyLimit: MANAGEMENT_BODY_LIMIT,
    // Refuse `{"__proto__": …}` and `{"constructor": {"prototype": …}}` outright.
    onProtoPoisoning: 'error',
    onConstructorPoisoning: 'error',
    routerOptions: { ignoreTrailingSlash: false, maxParamLength: 200 },
  })

  // Node drops headers past the 2,000th without a word, and with them a second Authorization
  // the single-header rule must see (DESIGN §3). The 16 KiB limit on the head still bounds them.
  app.server.maxHeadersCount = 0

  const bodyAjv = makeAjv(false)
  const textAjv = makeAjv(true)
  app.setValidatorCompiler(({ schema, httpPart }) =>
    (httpPart === 'body' ? bodyAjv : textAjv).compile(schema as object),
  )

  // JSON only, and a POST without a body is fine with or without a JSON content type (DESIGN §6).
  app.removeAllContentTypeParsers()
  const parseJson = app.getDefaultJsonParser('error', 'error')
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    if (body === '') return done(null, undefined)
    parseJson(request, body as string, (err, value) => {
      if (err) return done(new ApiError('invalid_json', 'the body is not valid JSON'), undefined)
      done(null, value)
    })
  })

  // `curl -X POST -d ''` sends a form content type with no body, and Node's http.request an
  // empty chunked one without a type: nothing to parse, so accept both. A body of any other type
  // is refused at its first byte.
  app.addContentTypeParser('*', (request, payload, done) => {
    const unsupported = () => new ApiError('unsupported_media_type', 'this endpoint accepts application/json only')
    if (request.headers['content-length'] === '0') return done(null, undefined)
    if (request.headers['content-length'] !== undefined) return done(unsupported(), undefined)
    let settled = false
    const settle = (err: Error | null) => {
      if (settled) return
      settled = true
      payload.removeAllListeners('data')
      done(err, undefined)
    }
    payload.on('data', () => settle(unsupported()))
    payload.once('end', () => settle(null))
    payload.once('error', (err: Error) => settle(err))
  })

  app.decorateRequest('principal', null)
  app.decorateRequest('actingTenant', null)
  app.decorateRequest('deadline', null)
  app.decorateRequest('singleHeaders', null)

  const metrics = deps.metrics ?? createMetrics()
  const cache = new TenancyCache({
    source: postgresLookups(deps.store.sql),
    redisUrl: deps.config.redisUrl,
    keyPrefix: deps.redisKeyPrefix ?? deps.config.redisKeyPrefix,
    timings: deps.cacheTimings,
    log: app.log,
    metrics,
  })
  const meter = new UsageMeter({
    sql: deps.store.sql,
    log: app.log,
    flushIntervalMs: deps.usageFlushIntervalMs,
    onFlushFailed: () => metrics.usageFlushFailures.inc(),
  })
  meter.start()
  metrics.usageLagMs = () => meter.lagMs()
  metrics.postgresConnections = () => connectionsByState(deps.store)
  if (deps.store.pool !== undefined) metrics.postgresPoolMax.set(deps.store.pool.max)
  app.decorate('metrics', metrics)
  const readiness = { draining: false }
  app.decorate('readiness', readiness)
  app.decorate('tenancyCache', cache)
  app.decorate('usageMeter', meter)
  // In-flight requests are done by now: write the last counts, then let Redis go.
  app.addHook('onClose', async () => {
    await meter.close()
    await cache.close()
  })

  // DESIGN §5: refused before any routing, management paths included, and before authentication.
  app.addHook('onRequest', (request, reply, done) => {
    // Every response carries the request id, errors included (they keep the headers set here).
    reply.header('x-request-id', request.id)
    if (isBadPath(pathOf(request.url))) {
      done(new ApiError('bad_path', 'the path may not contain .., //, ;, or an encoded dot pair, slash or backslash'))
      return
    }
    // RFC 9112 §3.2: a request with more than one Host is a 400 (Node keeps the first silently,
    // and X-Forwarded-Host would name it while an upstream might read another).
    if (singleHeaderCounts(request).host > 1) {
      done(new ApiError('bad_request', 'send one Host header'))
      return
    }
    // Fastify parses the body for its 404 handler too: answer before a parser can say 415 or 400.
    if (request.is404) {
      done(routeNotFound(request.method, pathOf(request.url)))
      return
    }
    // A management call waits on nothing but Postgres: past its deadline the answer is 503
    // store_unavailable, so that a partition does not hang it until a TCP timeout. (Fastify's own
    // handlerTimeout is cleared when a request body has been read, so it misses writes.)
    if (request.routeOptions.config.kind === 'management') {
      request.deadline = setTimeout(() => {
        if (!reply.sent) reply.send(new ApiError('store_unavailable', 'the store did not answer in time; try again'))
      }, MANAGEMENT_DEADLINE_MS)
    }
    done()
  })

  // Usage (DESIGN §6): every proxied request, and every refusal once a key authenticated, for the
  // tenant it acted as (the key's own when the refusal came before that was resolved).
  app.addHook('onResponse', (request, reply, done) => {
    if (request.deadline !== null) clearTimeout(request.deadline)
    const kind: RouteKind = request.is404 ? 'none' : (request.routeOptions.config.kind ?? 'none')
    metrics.observeRequest(kind, reply.statusCode, reply.elapsedTime / 1000)
    if (logging) logRequest(app.log, kind, request, reply)
    const proxied = kind === 'proxy'
    if (proxied) metrics.proxiedRequests.inc()
    const principal = request.principal
    if (principal !== null) {
      meter.keyUsed(principal.key.id)
      if (proxied || reply.statusCode >= 400) meter.record((request.actingTenant ?? principal.tenant).id, reply.statusCode)
    }
    done()
  })

  // Once shutdown began, every response says Connection: close, so that a keep-alive client lets
  // go as soon as its request is answered: Node closes only the connections idle at close time, and
  // one that was busy then would otherwise hold the shutdown until SHUTDOWN_TIMEOUT_MS.
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (readiness.draining) reply.header('connection', 'close')
    done(null, payload)
  })

  app.setErrorHandler(sendError)

  app.setNotFoundHandler((request) => {
    throw routeNotFound(request.method, pathOf(request.url))
  })

  // Every route says which part of the gateway it belongs to; the proxy marks its own.
  app.addHook('onRoute', (route) => {
    const config = (route.config ?? {}) as Partial<ProxiedRouteConfig> & { kind?: RouteKind }
    const kind: RouteKind = config.proxied === true ? 'proxy' : route.url.startsWith(MANAGEMENT_PREFIX) ? 'management' : 'ops'
    route.config = { ...config, kind }
  })

  await registerOpenApi(app)
  await app.register(healthRoutes, { sql: deps.store.sql, cache, readiness })
  await app.register(managementRoutes, {
    prefix: MANAGEMENT_PREFIX,
    sql: deps.store.sql,
    lookups: cache.lookups,
    cache,
  })
  await app.register(proxyRoutes, { routes, lookups: cache.lookups, upstreamDuration: metrics.upstreamDuration, recentAdmissions: metrics.recentAdmissions })

  return app
}
