// One proxied request's exchange with its upstream (docs/lifecycle.md, the steps): undici's
// handler, writing the answer straight to the client's response as it comes, under the header
// policy of headers.ts. No stream stands between the two: undici hands each chunk over, and the
// client's backpressure pauses the upstream's connection.
import type { IncomingHttpHeaders, OutgoingHttpHeaders, ServerResponse } from 'node:http'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Dispatcher } from 'undici'
import { ApiError, payloadTooLarge } from '../errors.js'
import type { UpstreamSpan } from '../shared/request-trace.js'
import { closesBeforeBodyEnds } from '../http/lingering-close.js'
import type { Exchange, UpstreamSide } from './exchange.js'
import type { MeterReports } from './meter-reports.js'
import { hasNoContent, isLengthMismatch } from './no-content.js'
import { BodyIdleError, BodyTooLargeError, BodyTooSlowError } from './request-body.js'
import type { ProxyRoute } from './route.js'
import { PerTryTimeoutError } from './upstreams/per-try-timeout.js'

const TIMEOUT_CODES = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT'])

/** undici's failures as the catalogue's: too slow is 504, anything else unreachable is 502. */
export function upstreamFailure(error: Error, route: ProxyRoute): ApiError {
  // The request body's own failures reach undici as the body stream's error.
  const cause = (error as { cause?: unknown }).cause
  const bodyError = [error, cause].find(
    (e) => e instanceof BodyTooLargeError || e instanceof BodyIdleError || e instanceof BodyTooSlowError,
  )
  if (bodyError instanceof BodyTooLargeError) return payloadTooLarge(bodyError.limit)
  if (bodyError instanceof BodyIdleError || bodyError instanceof BodyTooSlowError) {
    // The rest of the body may never come: the connection cannot carry another request.
    return new ApiError('request_timeout', bodyError.message, { headers: { connection: 'close' } })
  }
  const codes = [(error as { code?: string }).code, (cause as { code?: string } | undefined)?.code]
  if (codes.some((code) => code !== undefined && TIMEOUT_CODES.has(code))) {
    // An attempt that waited out retries.per_try_timeout_ms, not retried, had that long.
    const within = error instanceof PerTryTimeoutError ? error.timeoutMs : route.timeoutMs
    return new ApiError('upstream_timeout', `the upstream did not answer within ${within} ms`, {
      log: upstreamLog(`the upstream did not answer within ${within} ms`, error, route),
    })
  }
  return new ApiError('upstream_unavailable', 'the upstream could not be reached', {
    log: upstreamLog('the upstream could not be reached', error, route),
  })
}

/**
 * The operator's line of an upstream that failed: which upstream (its URL, which holds no
 * credentials: route-table.ts refuses them), behind which route, and why, in undici's or the
 * socket's own words and code (`ECONNREFUSED`, `UND_ERR_SOCKET`), its cause's too.
 */
function upstreamLog(
  what: string,
  error: Error,
  route: ProxyRoute,
): { message: string; fields: Record<string, unknown> } {
  const why = [error, (error as { cause?: unknown }).cause]
    .filter((e): e is Error => e instanceof Error)
    .map((e) => {
      const code = (e as { code?: string }).code
      return code === undefined || e.message.includes(code) ? e.message : `${code} ${e.message}`
    })
    .join(': ')
  return {
    message: `${what}: ${route.upstream} (route ${route.prefix}): ${why}`,
    fields: { upstream: route.upstream, route: route.prefix, cause: why },
  }
}

/** What a call needs of its route's upstream (UpstreamTarget, upstream-target.ts). */
export interface CallTarget {
  readonly route: ProxyRoute
  /** The upstream's origin (the first target's, with targets): a client span's `server.address`. */
  readonly origin: string
  /** The units its upstream reports; null on a route without meters. */
  readonly meterReports: MeterReports | null
  /** Charges an answer's reported units to limits in units once it ended; null without meters. */
  readonly chargeUnits: ((request: FastifyRequest) => void) | null
  /** The upstream's response headers as the client gets them. */
  answerHeaders(reply: FastifyReply, upstream: IncomingHttpHeaders, statusCode: number): OutgoingHttpHeaders
  observeUpstream(request: FastifyRequest): void
}

/** Whether an object has a property of its own: without making a list of them. */
function hasAny(object: object | null | undefined): boolean {
  for (const _ in object) return true
  return false
}

/** The upstream's side of one request: undici's handler, writing the answer to the client. */
export class UpstreamCall implements Dispatcher.DispatchHandler, UpstreamSide {
  private controller: Dispatcher.DispatchController | null = null
  /** The answer's head went to the client: a failure from now on can only cut it short. */
  private answering = false
  /** The answer has no content (a 204, a 304, an answer to HEAD: no-content.ts), whatever its head says. */
  private withoutContent = false
  /** The upstream broke off its answer after it began (not the client's doing). */
  broken = false
  /** The request went out on an upstream connection: from now on it counts, however it ends. */
  sent = false
  /** The upstream's side is over, or no longer wanted: later callbacks change nothing. */
  private done = false
  /** The client span of the attempt under way, started as it is dispatched; null with tracing off. */
  private span: UpstreamSpan | null = null
  /** The upstream's final status, once its head came. */
  private statusCode: number | null = null
  private readonly response: ServerResponse

  private readonly request: FastifyRequest
  private readonly reply: FastifyReply
  private readonly exchange: Exchange
  private readonly target: CallTarget
  constructor(request: FastifyRequest, reply: FastifyReply, exchange: Exchange, target: CallTarget) {
    this.request = request
    this.reply = reply
    this.exchange = exchange
    this.target = target
    this.response = reply.raw
  }

  /**
   * With tracing on, starts the client span of the attempt about to be sent with `headers`, and
   * names it in their `traceparent`, so that the upstream's spans hang from it; the client's
   * tracestate passes as it came. Each attempt, the first and every retry (retry-call.ts), has its
   * own span: this is where the upstream's traceparent is set.
   */
  startSpan(headers: OutgoingHttpHeaders): void {
    const trace = this.request.trace
    if (trace == null) return
    const span = trace.upstream(this.target.origin, this.request.method)
    this.span = span
    headers.traceparent = span.traceparent
  }

  /**
   * The attempt under way was handed to its target with `headers` (a balanced route's pool set
   * their Host to the target it picked): its span names that target.
   */
  dispatched(headers: OutgoingHttpHeaders): void {
    const host = headers.host
    if (this.span !== null && typeof host === 'string') this.span.sentTo(host)
  }

  /**
   * The attempt under way was given up to be sent again (retry-call.ts): its span ends with what
   * failed it, its status if it answered, and the retry's reason as `error.type`.
   */
  attemptRetried(statusCode: number | null, reason: string): void {
    this.endSpan(reason, statusCode)
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller
    // The client left while undici connected: nothing is sent.
    if (this.done) controller.abort(new Error('the client left'))
    else this.sent = true
  }

  onResponseStart(controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    // 1xx informational answers (interim-answers.ts): the client gets the final one; the gateway
    // answers the client's Expect itself (steps/send-continue.ts).
    if (statusCode < 200) return
    this.statusCode = statusCode
    const { request, reply, exchange, target } = this
    target.observeUpstream(request)
    exchange.upstreamSettled()
    if (exchange.clientGone()) {
      this.done = true
      controller.abort(new Error('the client left'))
      return
    }
    if (statusCode > 599) {
      this.done = true
      controller.abort(new Error(`status ${statusCode}`))
      this.endSpan('upstream_unavailable')
      this.fail(new ApiError('upstream_unavailable', `the upstream answered with status ${statusCode}`))
      return
    }
    const head = target.answerHeaders(reply, headers, statusCode)
    if (target.meterReports !== null) exchange.reported = target.meterReports.fromHeaders(headers, request.log)
    reply.hijack()
    this.answering = true
    this.response.writeHead(statusCode, head)
    this.withoutContent = hasNoContent(statusCode, request.method)
    const length = this.withoutContent ? 0 : Number(head['content-length'] ?? Number.NaN)
    exchange.responding(Number.isSafeInteger(length) ? length : null)
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    this.exchange.answered(chunk.length)
    if (!this.response.write(chunk)) {
      controller.pause()
      this.response.once('drain', () => controller.resume())
    }
  }

  onResponseEnd(_controller: Dispatcher.DispatchController, trailers: IncomingHttpHeaders): void {
    this.done = true
    const meterReports = this.target.meterReports
    // Only a streamed answer has trailers (most answers have none to read).
    if (meterReports !== null && hasAny(trailers)) {
      const exchange = this.exchange
      exchange.reported = meterReports.fromTrailers(trailers, exchange.reported, this.response, this.request.log)
    }
    this.answered()
    this.endSpan()
    this.response.end()
  }

  /** Ends this attempt's client span, if it has one (tracing on), once. */
  private endSpan(errorType?: string, statusCode = this.statusCode): void {
    const span = this.span
    if (span === null) return
    this.span = null
    span.end(statusCode, errorType)
  }

  /**
   * The answer is over, whole or cut short after its head: what it reported is final, and charged
   * to the limits in units (the usage meter counts the same report when the request is answered).
   */
  private answered(): void {
    if (!this.answering) return
    // Never a throw here: it runs before the answer ends, and from the client's 'close' listener.
    try {
      this.target.chargeUnits?.(this.request)
    } catch (err) {
      this.request.log.warn({ err }, "limits in units: an answer's units were not charged")
    }
  }

  onResponseError(controller: Dispatcher.DispatchController, error: Error): void {
    if (this.done) {
      // Aborted because the client left before the answer (clientLeft): settled all the same.
      this.exchange.upstreamSettled()
      this.endSpan('client_aborted')
      return
    }
    // A 204 or 304 naming a length: its head was all of it (no-content.ts).
    if (this.withoutContent && isLengthMismatch(error)) {
      this.onResponseEnd(controller, {})
      return
    }
    this.done = true
    const exchange = this.exchange
    if (this.answering) {
      // Too late for an error answer: the client gets a cut-off one, as from the upstream.
      this.broken = true
      this.endSpan('upstream_aborted')
      this.answered()
      this.request.log.warn({ err: error }, 'the upstream broke off its answer')
      this.response.destroy()
      return
    }
    exchange.upstreamSettled()
    // A client that hung up gets nothing, and is not an upstream failure (exchange.ts logs it).
    if (exchange.clientGone()) {
      this.endSpan('client_aborted')
      return
    }
    const failure = upstreamFailure(error, this.target.route)
    this.endSpan(failure.code)
    this.fail(failure)
  }

  /** The gateway's own answer in place of the upstream's. */
  private fail(error: ApiError): void {
    // The rest of a body the upstream did not take never will be read: the connection cannot
    // carry another request, and must not stay open on it (exchange.ts ends the body itself).
    if (closesBeforeBodyEnds(this.request.raw)) this.reply.header('connection', 'close')
    this.reply.send(error)
  }

  /** The client left: an answer still coming is not wanted any more. */
  clientLeft(): void {
    if (this.done) return
    this.done = true
    this.answered()
    this.endSpan('client_aborted')
    this.controller?.abort(new Error('the client left'))
  }
}
