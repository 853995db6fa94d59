// Every path outside /v1/sub-accounts: authenticate, apply the acting rules and the route's
// scopes, then stream the request to the route's upstream with @fastify/http-proxy under the
// header policy of docs/api.md. One encapsulated context per route, so that each has its own
// connection pool, timeout and body limit, and the router picks the longest prefix.
import { Transform, type TransformCallback } from 'node:stream'
import { performance } from 'node:perf_hooks'
import type { FastifyContextConfig, FastifyInstance, FastifyPluginAsync, FastifyRequest } from 'fastify'
import httpProxy from '@fastify/http-proxy'
import { insufficientScope } from '../auth/scopes.js'
import { ApiError, routeNotFound } from '../errors.js'
import type { LatencyHistogram, Tally } from '../ops/fast-metrics.js'
import { tenancyAdmission } from '../tenancy/recent-admissions.js'
import type { TenancyLookups } from '../tenancy/lookups.js'
import { downstreamHeaders, upstreamHeaders, type TrustedIdentity } from './headers.js'
import { isReservedPath, pathOf } from './paths.js'
import { prefixShadowCheck } from './prefix-shadow.js'
import { scopesFor, type ProxyRoute } from './route-table.js'

export interface ProxyOptions {
  routes: readonly ProxyRoute[]
  lookups: TenancyLookups
  /** Time to the upstream's response headers, in seconds. */
  upstreamDuration: LatencyHistogram
  /** Requests admitted from the last second's memory (tenancy/recent-admissions.ts). */
  recentAdmissions: Tally
}

declare module 'fastify' {
  interface FastifyRequest {
    /** performance.now() when the request left for the upstream. */
    upstreamSentAt: number
  }
}

class BodyTooLargeError extends Error {
  constructor(readonly limit: number) {
    super(`the request body is larger than ${limit} bytes`)
    this.name = 'BodyTooLargeError'
  }
}

function tooLarge(limit: number): ApiError {
  return new ApiError('payload_too_large', `the request body is larger than ${limit} bytes`)
}

/**
 * Proxied bodies are never parsed: the request stream itself goes upstream. A declared length
 * over the limit is refused before a byte is read; the HTTP parser holds a declared body to its
 * length, so only a chunked body needs counting on the way.
 */
function streamBodyUpTo(limit: number) {
  return (
    request: FastifyRequest,
    payload: NodeJS.ReadableStream,
    done: (err: Error | null, body?: unknown) => void,
  ) => {
    const declared = request.headers['content-length']
    if (declared !== undefined) {
      if (Number(declared) > limit) return done(tooLarge(limit))
      return done(null, payload)
    }
    let seen = 0
    const counter = new Transform({
      transform(chunk: Buffer, _encoding, callback: TransformCallback) {
        seen += chunk.length
        if (seen > limit) callback(new BodyTooLargeError(limit))
        else callback(null, chunk)
      },
    })
    payload.on('error', (err) => counter.destroy(err))
    payload.pipe(counter)
    done(null, counter)
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
  if (cause instanceof BodyTooLargeError) return tooLarge(cause.limit)
  const codes = [(error as { code?: string }).code, (cause as { code?: string } | undefined)?.code]
  if (codes.some((code) => code !== undefined && TIMEOUT_CODES.has(code))) {
    return new ApiError('upstream_timeout', `the upstream did not answer within ${route.timeoutMs} ms`)
  }
  return new ApiError('upstream_unavailable', 'the upstream could not be reached')
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
  { routes, lookups, upstreamDuration, recentAdmissions }: ProxyOptions,
): Promise<void> {
  await app.register(async (scope) => {
    scope.removeAllContentTypeParsers()
    scope.addContentTypeParser('*', streamBodyUpTo(route.maxBodyBytes))

    // One hook for the whole check, in the order of docs/api.md. A callback hook: a request admitted
    // from the last second's memory goes on without a single promise.
    const admission = tenancyAdmission(lookups)
    const shadowsLongerPrefix = prefixShadowCheck(route.prefix, routes)
    scope.addHook('onRequest', function admitProxied(request, _reply, done) {
      // The router may fall back to a shorter prefix (a catch-all) for a path the gateway serves
      // itself, with a method or depth it does not serve: that is still not a proxied path.
      const path = pathOf(request.url)
      if (isReservedPath(path)) return done(routeNotFound(request.method, path))
      // A spelling of a longer route's prefix that a folding upstream would serve as that route.
      if (shadowsLongerPrefix(path)) return done(routeNotFound(request.method, path))
      if (route.public) return done()
      if (admission.fromRecent(request)) {
        recentAdmissions.inc()
        return done(scopeRefusal(route, request))
      }
      admission.resolve(request).then(() => done(scopeRefusal(route, request)), done)
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
        headersTimeout: route.timeoutMs,
        bodyTimeout: route.timeoutMs,
        connectTimeout: Math.min(route.timeoutMs, 10_000),
      },
      replyOptions: {
        rewriteRequestHeaders: (request, headers) => {
          ;(request as FastifyRequest).upstreamSentAt = performance.now()
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
          return downstreamHeaders(headers)
        },
        onError: (reply, { error }) => {
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
  for (const route of options.routes) await registerRoute(app, route, options)
}
