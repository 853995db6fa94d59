// Every path outside /v1/sub-accounts: authenticate, apply the acting rules and the route's
// scopes, then stream the request to the route's upstream with @fastify/http-proxy under the
// header policy of docs/api.md. One encapsulated context per route, so that each has its own
// connection pool, timeout and body limit, and the router picks the longest prefix.
import { performance } from 'node:perf_hooks'
import type { Readable } from 'node:stream'
import type { FastifyContextConfig, FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import httpProxy from '@fastify/http-proxy'
import { expectsContinue } from '../http/expect-continue.js'
import { insufficientScope } from '../auth/scopes.js'
import type { IdentityAssertions } from '../credentials/identity-assertions.js'
import { ApiError, payloadTooLarge, routeNotFound } from '../errors.js'
import type { LatencyHistogram, Tally } from '../ops/fast-metrics.js'
import { tenancyAdmission } from '../tenancy/recent-admissions.js'
import type { TenancyLookups } from '../tenancy/lookups.js'
import { RouteConcurrency, type SlotHolder, type SlotRefusal } from './concurrency.js'
import { type ClientAbortTallies, Exchange } from './exchange.js'
import { downstreamHeaders, upstreamHeaders, type TrustedIdentity } from './headers.js'
import type { LimitGate } from './limit-gate.js'
import { isReservedPath, pathOf } from './paths.js'
import { prefixShadowCheck } from './prefix-shadow.js'
import { BodyIdleError, BodyTooLargeError, declaresTooMuch, streamBody } from './request-body.js'
import { scopesFor, type ProxyRoute } from './route-table.js'

export interface ProxyOptions {
  routes: readonly ProxyRoute[]
  lookups: TenancyLookups
  /** Time to the upstream's response headers, in seconds. */
  upstreamDuration: LatencyHistogram
  /** Requests admitted from the last second's memory (tenancy/recent-admissions.ts). */
  recentAdmissions: Tally
  clientAborts: ClientAbortTallies
  /** Where each route's slots are read at scrape time (tgw_proxy_upstream_slots). */
  upstreamSlots?: Map<string, () => { held: number; waiting: number }>
  limits: LimitGate
  /** Signs the identity of requests on routes with `identity`; null when no route has it. */
  identity: IdentityAssertions | null
  /** The console is served at /console (CONSOLE=on): no route proxies its paths. */
  consoleServed?: boolean
}

declare module 'fastify' {
  interface FastifyRequest {
    /** performance.now() when the request left for the upstream. */
    upstreamSentAt: number
    /** The signed identity for the upstream (X-Service-Identity), on a route with `identity`. */
    serviceIdentity: string | null
  }
}

function causeOf(error: Error): unknown {
  return (error as { cause?: unknown }).cause
}

const TIMEOUT_CODES = new Set([
  'FST_REPLY_FROM_GATEWAY_TIMEOUT',
  'FST_REPLY_FROM_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
])

/** reply-from's failures as the catalogue's: too slow is 504, anything else unreachable is 502. */
function upstreamFailure(error: Error, route: ProxyRoute): ApiError {
  const cause = causeOf(error)
  if (cause instanceof BodyTooLargeError) return payloadTooLarge(cause.limit)
  if (cause instanceof BodyIdleError) {
    // The rest of the body may never come: the connection cannot carry another request.
    return new ApiError('request_timeout', `the request body sent nothing for ${cause.idleMs} ms`, {
      headers: { connection: 'close' },
    })
  }
  const codes = [(error as { code?: string }).code, (cause as { code?: string } | undefined)?.code]
  if (codes.some((code) => code !== undefined && TIMEOUT_CODES.has(code))) {
    return new ApiError('upstream_timeout', `the upstream did not answer within ${route.timeoutMs} ms`)
  }
  return new ApiError('upstream_unavailable', 'the upstream could not be reached')
}

const RETRY_SOON = { 'retry-after': '1' }

function busy(refusal: SlotRefusal, route: ProxyRoute): ApiError {
  if (refusal === 'tenant_busy')
    return new ApiError(
      'too_many_concurrent_requests',
      `this tenant already has ${route.maxConnectionsPerTenant} requests in flight on this route`,
      { headers: RETRY_SOON },
    )
  return refusal === 'account_busy'
    ? new ApiError(
        'too_many_concurrent_requests',
        `this account and its sub-accounts already have ${route.maxConnectionsPerAccount} requests in flight on this route`,
        { headers: RETRY_SOON },
      )
    : new ApiError('upstream_busy', `every connection to this route's upstream stayed busy for ${route.timeoutMs} ms`, {
        headers: RETRY_SOON,
      })
}

/** The tenant a request acts as, and the parent account its key belongs to: whose shares it takes. */
function slotHolder(request: FastifyRequest): SlotHolder {
  const keyTenant = request.principal!.tenant
  return { tenantId: request.actingTenant!.id, accountId: keyTenant.parentId ?? keyTenant.id }
}

/** The route's scopes checked against the admitted key's: the 403 to answer, or undefined. */
function scopeRefusal(route: ProxyRoute, request: FastifyRequest): Error | undefined {
  return insufficientScope(request.principal!.key.scopes, scopesFor(route, request.method))
}

function identityOf(request: FastifyRequest): TrustedIdentity | null {
  const principal = request.principal
  const acting = request.actingTenant
  if (principal === null || acting === null) return null
  return {
    resolvedTenantId: acting.id,
    callerTenantId: principal.tenant.id,
    keyId: principal.key.id,
    scopes: principal.key.scopes,
    assertion: request.serviceIdentity,
  }
}

/** The upstream path: the request's own, appended to the upstream URL's base path if it has one. */
function rewritePrefixFor(route: ProxyRoute): string {
  const basePath = new URL(route.upstream).pathname.replace(/\/+$/, '')
  return route.prefix === '/' ? basePath : basePath + route.prefix
}

async function registerRoute(
  app: FastifyInstance,
  route: ProxyRoute,
  {
    routes,
    lookups,
    upstreamDuration,
    recentAdmissions,
    clientAborts,
    upstreamSlots,
    limits,
    identity,
    consoleServed,
  }: ProxyOptions,
): Promise<void> {
  await app.register(async (scope) => {
    scope.removeAllContentTypeParsers()
    scope.addContentTypeParser('*', streamBody(route.maxBodyBytes, route.bodyIdleTimeoutMs))

    const slots = new RouteConcurrency(
      route.maxConnections,
      route.maxConnectionsPerTenant,
      route.maxConnectionsPerAccount,
      route.timeoutMs,
    )
    upstreamSlots?.set(route.prefix, () => ({ held: slots.active, waiting: slots.waiting }))
    /** Last of the checks: a slot to the upstream, then the 100 Continue a client may be waiting for. */
    function takeSlot(request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) {
      const continues = expectsContinue(request)
      if (continues && declaresTooMuch(request, route.maxBodyBytes)) return done(payloadTooLarge(route.maxBodyBytes))
      const holder = route.public ? null : slotHolder(request)
      // A waiting request whose client leaves gives up its place and its tenant's share at once.
      const leave = () => slots.withdraw(start)
      const start = (refusal: SlotRefusal | null) => {
        reply.raw.off('close', leave)
        if (refusal !== null) {
          limits.refund(request)
          return done(busy(refusal, route))
        }
        request.exchange = new Exchange(slots, holder, request, reply, clientAborts, route.responseIdleTimeoutMs)
        // A client that left just as a slot came: its Exchange gave the slot back and logged it,
        // and the request goes no further (nothing is sent upstream, nothing can be answered).
        if (request.exchange.clientGone()) return limits.refund(request)
        // RFC 9110 §10.1.1: the client sends its body once told to; the upstream never sees Expect.
        if (continues) reply.raw.writeContinue()
        done()
      }
      const attempt = slots.tryAcquire(holder, start)
      if (attempt === 'taken') start(null)
      else if (attempt === 'waiting') reply.raw.once('close', leave)
    }

    // One hook for the whole check, in the order of docs/api.md. A callback hook: a request admitted
    // from the last second's memory goes on without a single promise.
    const admission = tenancyAdmission(lookups)
    const shadowsLongerPrefix = prefixShadowCheck(route.prefix, routes)
    // Signed before the limits take anything: a signing that fails then has nothing to give back.
    const assertionFor = route.identity === null || identity === null ? null : identity.forRoute(route.identity)
    const checkLimits = (request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) =>
      limits.check(request, reply, done, () => takeSlot(request, reply, done))
    const admitted = (request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) => {
      const refusal = scopeRefusal(route, request)
      if (refusal !== undefined) return done(refusal)
      if (assertionFor === null) return checkLimits(request, reply, done)
      const assertion = assertionFor(request.principal!, request.actingTenant!)
      if (typeof assertion === 'string') {
        request.serviceIdentity = assertion
        return checkLimits(request, reply, done)
      }
      assertion.then((token) => {
        request.serviceIdentity = token
        checkLimits(request, reply, done)
      }, done)
    }
    scope.addHook('onRequest', function admitProxied(request, reply, done) {
      // The router may fall back to a shorter prefix (a catch-all) for a path the gateway serves
      // itself, with a method or depth it does not serve: that is still not a proxied path.
      const path = pathOf(request.url)
      if (isReservedPath(path, consoleServed)) return done(routeNotFound(request.method, path))
      // A spelling of a longer route's prefix that a folding upstream would serve as that route.
      if (shadowsLongerPrefix(path)) return done(routeNotFound(request.method, path))
      if (route.public) return takeSlot(request, reply, done)
      if (admission.fromRecent(request)) {
        recentAdmissions.inc()
        return admitted(request, reply, done)
      }
      admission.resolve(request).then(() => admitted(request, reply, done), done)
    })

    // Marks its routes as proxied, for the metrics, the request line, and the usage meter (which
    // counts these whatever their status). Every other route is marked by its own plugin.
    const config: FastifyContextConfig = { kind: 'proxy' }
    await scope.register(httpProxy, {
      upstream: route.upstream,
      prefix: route.prefix === '/' ? undefined : route.prefix,
      rewritePrefix: rewritePrefixFor(route),
      // Bodies stream through untouched: the parser above hands over the request stream.
      proxyPayloads: false,
      config,
      disableRequestLogging: true,
      undici: {
        // The slots above keep requests to at most this many, so undici never queues one.
        connections: route.maxConnections,
        headersTimeout: route.timeoutMs,
        bodyTimeout: route.timeoutMs,
        connectTimeout: Math.min(route.timeoutMs, 10_000),
        // reply-from turns certificate checks off unless told otherwise: an https upstream must
        // prove who it is (docs/configuration.md).
        connect: { rejectUnauthorized: true },
      },
      replyOptions: {
        rewriteRequestHeaders: (request, headers) => {
          ;(request as FastifyRequest).upstreamSentAt = performance.now()
          ;(request as FastifyRequest).exchange?.sentUpstream()
          return upstreamHeaders(headers, {
            identity: route.public ? null : identityOf(request as FastifyRequest),
            requestId: request.id,
            forwardAuthorization: route.forwardAuthorization,
            clientIp: request.ip,
            proto: request.protocol === 'https' ? 'https' : 'http',
            host: request.headers.host,
            connection: request.raw.headers.connection,
            passHeaders: route.passHeaders,
          }) as typeof headers
        },
        rewriteHeaders: (headers, request) => {
          upstreamDuration.observe((performance.now() - (request as FastifyRequest).upstreamSentAt) / 1000)
          ;(request as FastifyRequest).exchange?.upstreamSettled()
          return downstreamHeaders(headers)
        },
        onResponse: (request, reply, res) => {
          const body = (res as unknown as { stream: Readable }).stream
          ;(request as FastifyRequest).exchange?.responding(body)
          reply.send(body)
        },
        onError: (reply, { error }) => {
          const exchange = (reply.request as FastifyRequest).exchange
          exchange?.upstreamSettled()
          // A client that hung up gets nothing, and is not an upstream failure (exchange.ts logs it).
          if (exchange?.clientGone()) return
          reply.send(upstreamFailure(error, route))
        },
        // Never retry: a write must not reach the upstream twice, and reply-from would otherwise
        // retry a GET answered 503 up to ten times (a retry storm against a struggling upstream).
        retryDelay: () => null,
      },
    })
  })
}

export const proxyRoutes: FastifyPluginAsync<ProxyOptions> = async (app, options) => {
  app.decorateRequest('upstreamSentAt', 0)
  app.decorateRequest('serviceIdentity', null)
  app.decorateRequest('exchange', null)
  app.decorateRequest('limitSubjects', null)
  app.decorateRequest('limitsCharged', false)
  for (const route of options.routes) await registerRoute(app, route, options)
}
