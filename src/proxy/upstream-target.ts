// A route's upstream, built once when the route is registered: its undici pool, the path a
// request takes there, the headers each way (headers.ts, answer-headers.ts), and `forward`, the
// route's handler, which hands each admitted request to an UpstreamCall (upstream-call.ts).
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http'
import { performance } from 'node:perf_hooks'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { Pool, type Dispatcher } from 'undici'
import { append as appendVary } from 'vary'
import { closesBeforeBodyEnds } from '../http/lingering-close.js'
import { mergedRateLimitFields } from '../limits/upstream-fields.js'
import type { LatencyHistogram } from '../shared/fast-metrics.js'
import { AnswerHeaders } from './answer-headers.js'
import { downstreamHeaders, trustedIdentity, upstreamHeaders } from './headers.js'
import { interimAnswersConnector } from './interim-answers.js'
import { type BadReportCounter, MeterReports } from './meter-reports.js'
import type { ProxyRoute } from './route.js'
import { type CallTarget, UpstreamCall } from './upstream-call.js'
import type { CellUpstreams } from './upstreams/cell-upstreams.js'
import { RetryBudget } from './upstreams/retry-budget.js'
import { type RetryCounters, type RetryRoute, RetryingCall } from './upstreams/retry-call.js'
import { cellTargetUrls } from './upstreams/route-cells.js'
import type { RouteUpstreams, Target } from './upstreams/route-upstreams.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** performance.now() when the request left for the upstream. */
    upstreamSentAt: number
  }
}

/** What a route's requests are sent with, built once when the route is registered. */
export class UpstreamTarget implements CallTarget {
  /**
   * The upstream's pool; on a route with targets, their balancer (upstreams/), a pool per target;
   * on a route with cells, a balancer per cell.
   */
  readonly pool: Pool | RouteUpstreams | CellUpstreams
  /** The upstream's base path and the route's prefix: what the matched prefix becomes upstream. */
  readonly upstreamPrefix: string
  /** The prefix as clients see it ('' for the catch-all). */
  private readonly publicPrefix: string
  private readonly host: string
  /** Location and Set-Cookie as the client gets them. */
  private readonly answerRules: AnswerHeaders

  readonly route: ProxyRoute
  private readonly upstreamDuration: LatencyHistogram
  /** True once shutdown began: every answer says Connection: close (ops/readiness-plugin.ts). */
  private readonly draining: () => boolean
  /** The units its upstream reports; null on a route without meters. */
  readonly meterReports: MeterReports | null
  /** Charges an answer's reported units to limits in units once it ended; null without meters. */
  readonly chargeUnits: ((request: FastifyRequest) => void) | null
  /** The upstream's origin (the first target's, with targets): a client span's `server.address`. */
  readonly origin: string
  /** The route's retries (upstreams/retry-call.ts); null when it has none (`attempts: 0`). */
  private readonly retry: RetryRoute | null
  constructor(
    route: ProxyRoute,
    upstreamDuration: LatencyHistogram,
    draining: () => boolean,
    badReport: BadReportCounter = () => {},
    chargeUnits: (request: FastifyRequest) => void = () => {},
    upstreams: RouteUpstreams | CellUpstreams | null = null,
    retryCounters: RetryCounters = NO_RETRY_COUNTERS,
  ) {
    this.route = route
    this.meterReports = route.meters.length === 0 ? null : new MeterReports(route, badReport)
    this.chargeUnits = route.meters.length === 0 ? null : chargeUnits
    this.upstreamDuration = upstreamDuration
    this.draining = draining
    // Built only for a route with an upstream (plugin.ts): one only decided for has none to call.
    const url = new URL(route.upstream!)
    this.origin = url.origin
    const basePath = url.pathname.replace(/\/+$/, '')
    this.publicPrefix = route.prefix === '/' ? '' : route.prefix
    this.upstreamPrefix = basePath + this.publicPrefix
    this.host = url.host
    // With targets or cells, a Location may name any of them (the first is `url`).
    const targetOrigins = [
      ...(route.targets?.targets.map((target) => target.url) ?? []),
      ...cellTargetUrls(route.cells),
    ].map((target) => new URL(target).origin)
    this.answerRules = new AnswerHeaders(
      url,
      this.upstreamPrefix,
      this.publicPrefix,
      isSandboxed(route),
      targetOrigins,
      route.cors !== null,
    )
    const pool = upstreams ?? upstreamPool(url.origin, route)
    this.pool = pool
    this.retry =
      route.retries.attempts === 0
        ? null
        : {
            options: route.retries,
            timeoutMs: route.timeoutMs,
            budget: new RetryBudget(route.retries.budgetPercent),
            counters: retryCounters,
            send:
              pool instanceof Pool
                ? (options, handler) => {
                    // One upstream: a retry goes to it again, on another connection (the failed one is closed).
                    pool.dispatch(options, handler)
                    return null
                  }
                : (options, handler, avoid) => pool.dispatchAvoiding(options, handler, avoid as Target | null),
          }
  }

  /** The route's handler: the request, admitted by every step, goes to the upstream. */
  forward(request: FastifyRequest, reply: FastifyReply): void {
    const route = this.route
    const exchange = request.exchange!
    const call = new UpstreamCall(request, reply, exchange, this)
    const headers = upstreamHeaders(request.headers, {
      identity: route.public ? null : trustedIdentity(request),
      requestId: request.id,
      forwardAuthorization: route.forwardAuthorization,
      peerAddress: request.socket.remoteAddress,
      proto: request.protocol === 'https' ? 'https' : 'http',
      host: request.headers.host,
      connection: request.raw.headers.connection,
      passHeaders: route.passHeaders,
      cell: request.cell,
    })
    headers.host = this.host
    call.startSpan(headers)
    request.upstreamSentAt = performance.now()
    const options = {
      path: this.upstreamPath(request.url),
      method: request.method as Dispatcher.HttpMethod,
      headers: headers as Record<string, string | string[]>,
      // The parser of proxy/request-body.ts hands over the request stream; none for a GET.
      body: (request.body as NodeJS.ReadableStream | undefined) ?? null,
    } as Dispatcher.DispatchOptions
    const retry = this.retry
    if (retry === null) {
      exchange.sentUpstream(call)
      this.pool.dispatch(options, call)
      call.dispatched(headers)
      return
    }
    const retrying = new RetryingCall(call, request, exchange, retry, options)
    exchange.sentUpstream(retrying)
    retrying.start()
  }

  /** The upstream's path and query: the request's own, its prefix replaced by the upstream's. */
  upstreamPath(url: string): string {
    const cut = this.publicPrefix === '' ? 0 : rawPrefixLength(url, this.publicPrefix)
    // The router matched the prefix, so it is there; should it not be, the path goes as it came.
    if (cut === -1) return url
    const path = this.upstreamPrefix + url.slice(cut)
    return path === '' || path.charCodeAt(0) === 63 /* ? */ ? `/${path}` : path
  }

  /** The upstream's response headers as the client gets them, on top of those the gateway set. */
  answerHeaders(reply: FastifyReply, upstream: IncomingHttpHeaders, statusCode: number): OutgoingHttpHeaders {
    const headers = downstreamHeaders(upstream, this.meterReports?.hidden)
    this.answerRules.apply(headers)
    const out = reply.getHeaders() as OutgoingHttpHeaders
    // The gateway's RateLimit fields stay first, the upstream's after them (limits/upstream-fields.ts).
    const limitFields =
      headers.ratelimit === undefined && headers['ratelimit-policy'] === undefined
        ? null
        : mergedRateLimitFields(out, headers)
    // The reply's `Vary: Origin` (a CORS route's, steps/cors.ts) stays beside the upstream's own.
    const varyOrigin = out.vary !== undefined && headers.vary !== undefined ? out.vary : undefined
    for (const name in headers) out[name] = headers[name]
    if (limitFields !== null) Object.assign(out, limitFields)
    if (varyOrigin !== undefined) out.vary = appendVary(String(headers.vary), String(varyOrigin))
    if (statusCode === 204) {
      // RFC 9110 §8.6: an answer without content has no Content-Type or Content-Length.
      delete out['content-type']
      delete out['content-length']
    }
    // A connection whose request body was not read whole cannot carry another request: the
    // client's upload would stall on it, and a shutdown wait for it. It closes lingering, as the
    // gateway's own answers do (fail), or the rest of the body, arriving after the close, is
    // answered with a reset that can make the client's stack throw the answer away.
    if (closesBeforeBodyEnds(reply.request.raw) || this.draining()) out.connection = 'close'
    return out
  }

  observeUpstream(request: FastifyRequest): void {
    this.upstreamDuration.observe((performance.now() - request.upstreamSentAt) / 1000)
  }
}

const NO_RETRY_COUNTERS: RetryCounters = { retried() {}, exhausted() {} }

/** The pool of one upstream (or of one of a route's targets) at `origin`. */
export function upstreamPool(origin: string, route: ProxyRoute, connections = route.maxConnections): Pool {
  return new Pool(origin, {
    // The slots keep requests to at most this many, so undici never queues one (with targets, the
    // route's slots bound them all: one target can carry the route alone).
    connections,
    headersTimeout: route.timeoutMs,
    bodyTimeout: route.timeoutMs,
    // An https upstream must prove who it is (docs/configuration.md); its informational answers
    // are passed by, and cannot start the headers timeout again (interim-answers.ts).
    connect: interimAnswersConnector({ rejectUnauthorized: true, timeout: Math.min(route.timeoutMs, 10_000) }),
  })
}

/** Whether a route's answers carry PUBLIC_ROUTE_CSP: a public route's, unless it opts out. */
export function isSandboxed(route: ProxyRoute): boolean {
  return route.public && !route.sameOriginDocuments
}

/**
 * The length in `url` of `prefix`, which the router matched with its percent-encodings decoded
 * (`/v1/th%69ngs/1` is under `/v1/things`); -1 when it is not there.
 */
export function rawPrefixLength(url: string, prefix: string): number {
  if (url.startsWith(prefix)) return prefix.length
  let decoded = ''
  let at = 0
  while (at < url.length && decoded.length < prefix.length) {
    if (url.charCodeAt(at) !== 37 /* % */) {
      decoded += url[at++]
      continue
    }
    // A UTF-8 character is up to four escaped bytes.
    let length = 3
    for (;;) {
      try {
        decoded += decodeURIComponent(url.slice(at, at + length))
        break
      } catch {
        if (length === 12 || url.charCodeAt(at + length) !== 37) return -1
        length += 3
      }
    }
    at += length
  }
  return decoded === prefix ? at : -1
}
