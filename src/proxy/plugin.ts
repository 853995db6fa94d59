// Every path outside /v1/sub-accounts: authenticate, apply the acting rules and the route's
// scopes, then stream the request to the route's upstream with @fastify/http-proxy under the
// header policy of docs/api.md. One encapsulated context per route, so that each has its own
// connection pool, timeout and body limit, and the router picks the longest prefix.
import { performance } from 'node:perf_hooks'
import type { Readable } from 'node:stream'
import type { FastifyContextConfig, FastifyInstance, FastifyPluginAsync, FastifyRequest } from 'fastify'
import httpProxy from '@fastify/http-proxy'
import { ApiError, payloadTooLarge } from '../errors.js'
import { stepsFor } from './checks.js'
import { downstreamHeaders, trustedIdentity, upstreamHeaders } from './headers.js'
import type { ProxyOptions } from './options.js'
import { runSteps } from './pipeline.js'
import { BodyIdleError, BodyTooLargeError, streamBody } from './request-body.js'
import type { ProxyRoute } from './route-table.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** performance.now() when the request left for the upstream. */
    upstreamSentAt: number
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

/** The upstream path: the request's own, appended to the upstream URL's base path if it has one. */
function rewritePrefixFor(route: ProxyRoute): string {
  const basePath = new URL(route.upstream).pathname.replace(/\/+$/, '')
  return route.prefix === '/' ? basePath : basePath + route.prefix
}

async function registerRoute(app: FastifyInstance, route: ProxyRoute, options: ProxyOptions): Promise<void> {
  const { upstreamDuration } = options
  await app.register(async (scope) => {
    scope.removeAllContentTypeParsers()
    scope.addContentTypeParser('*', streamBody(route.maxBodyBytes, route.bodyIdleTimeoutMs))
    // Every check, in order (proxy/checks.ts), in one hook: a request admitted from the last
    // second's memory passes them all without a single promise.
    scope.addHook('onRequest', runSteps(stepsFor(route, options)))

    // Marks its routes as proxied, for the metrics, the request line, and the usage meter (which
    // counts these whatever their status). Every other route is marked by its own plugin.
    const config: FastifyContextConfig = { kind: 'proxy' }
    const webSockets = route.websocket === null ? null : (options.webSockets ?? null)
    await scope.register(httpProxy, {
      // Upgrades go through the router, so the steps above run for them too; the last step opens the
      // upstream's socket, and the connection is the runtime's (proxy/websocket/runtime.ts).
      ...(webSockets === null
        ? {}
        : {
            websocket: true,
            wsServerOptions: {
              maxPayload: route.websocket!.maxMessageBytes,
              perMessageDeflate: false,
              autoPong: false,
              handleProtocols: webSockets.handleProtocols,
            },
          }),
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
            identity: route.public ? null : trustedIdentity(request as FastifyRequest),
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
  const webSockets = options.webSockets
  // After the drain period (main.ts), before the server closes: every socket told 1001.
  if (webSockets != null)
    app.addHook('preClose', (done) => {
      webSockets.closeAll()
      done()
    })
}
