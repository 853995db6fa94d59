// A proxied request's retries (docs/configuration.md, routes: `retries`): an undici handler between
// the route's dispatcher and the request's UpstreamCall (upstream-call.ts). Each attempt has its
// own small handler, so that the callbacks of an attempt given up (a 503 whose answer is dropped)
// never reach the client. The call passes on the attempt it keeps; until then a failure the rules
// allow is sent again, after a jittered backoff, to another target when the route has several.
// With `per_try_timeout_ms`, each attempt waits for its head no longer than that (undici's
// headersTimeout, whose expiry closes the connection): a hung target costs a try, not the request.
// The request counts once whatever its attempts (the exchange and fastify see one request);
// passive health hears every attempt, as each goes through its target's interceptor (target-call.ts).
import type { IncomingHttpHeaders } from 'node:http'
import { performance } from 'node:perf_hooks'
import type { FastifyRequest } from 'fastify'
import type { Dispatcher } from 'undici'
import type { Exchange, UpstreamSide } from '../exchange.js'
import type { UpstreamCall } from '../upstream-call.js'
import { HEADERS_TIMEOUT, PerTryTimeoutError } from './per-try-timeout.js'
import type { RetryBudget } from './retry-budget.js'
import type { RetriedReason, RetryOptions, RetryReason } from './retry-options.js'
import { errorOutcome } from './target-call.js'

/** RFC 9110 §9.2.2's idempotent methods the proxy carries: sending one twice does no more than once. */
const IDEMPOTENT = new Set(['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE'])
/** The connection broke after the request began to go out: some of it may have reached the upstream. */
const RESET_CODES = new Set(['ECONNRESET', 'EPIPE', 'UND_ERR_SOCKET'])
/** The first retry's backoff, in ms; doubled for each after it. */
export const BASE_BACKOFF_MS = 25

/** The backoff before retry `retry` (0 for the first): 25 ms doubled each time, jittered to [½, 1] of it. */
export function backoffMs(retry: number, random: () => number = Math.random): number {
  const ceiling = BASE_BACKOFF_MS * 2 ** retry
  return ceiling / 2 + (random() * ceiling) / 2
}

/**
 * What an attempt's failure is, as a retry reason; null when it is none (the route's timeout, the
 * client's abort). `perTry`: the attempt's headers timeout was per_try_timeout_ms, not the route's.
 */
export function failureReason(error: Error, reached: boolean, perTry = false): RetriedReason | null {
  // Before the request went out on a connection, a failure of the target's is a connect failure.
  if (!reached) return errorOutcome(error) === 'failure' ? 'connect_failure' : null
  const code = (error as { code?: string }).code ?? (error as { cause?: { code?: string } }).cause?.code
  if (code === HEADERS_TIMEOUT) return perTry ? 'per_try_timeout' : null
  return code !== undefined && RESET_CODES.has(code) ? 'reset' : null
}

/** The kind of `on` a retry reason stands for: a per-try timeout is its attempt's 504. */
function listedAs(reason: RetriedReason): RetryReason {
  return reason === 'per_try_timeout' ? '504' : reason
}

/** Counts retries and the budget's refusals (tgw_upstream_retries_total, ..._budget_exhausted_total). */
export interface RetryCounters {
  retried(reason: RetriedReason): void
  exhausted(): void
}

/** Sends one attempt through the route's pool, or its balancer, not to `avoid` if it can; returns where it went. */
export type SendAttempt = (
  options: Dispatcher.DispatchOptions,
  handler: Dispatcher.DispatchHandler,
  avoid: unknown,
) => unknown

/** What a route's calls share: its rules, its budget, its counters, and how an attempt is sent. */
export interface RetryRoute {
  /** The route's upstream origin (its first target's, with targets): a client span's `server.address`. */
  readonly upstreamUrl: string
  readonly options: RetryOptions
  readonly timeoutMs: number
  readonly budget: RetryBudget
  readonly counters: RetryCounters
  readonly send: SendAttempt
}

/** One attempt's callbacks, handed to the call with the attempt they belong to. */
class Attempt implements Dispatcher.DispatchHandler {
  /** Its request went out on a connection (undici's onRequestStart). */
  reached = false
  /** Its headers timeout is per_try_timeout_ms (shorter than what was left of timeout_ms). */
  readonly perTry: boolean
  private readonly call: RetryingCall
  constructor(call: RetryingCall, perTry: boolean) {
    this.call = call
    this.perTry = perTry
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.reached = true
    this.call.started(this, controller)
  }

  onResponseStart(controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    this.call.responseStarted(this, controller, statusCode, headers)
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    this.call.data(this, controller, chunk)
  }

  onResponseEnd(controller: Dispatcher.DispatchController, trailers: IncomingHttpHeaders): void {
    this.call.ended(this, controller, trailers)
  }

  onResponseError(controller: Dispatcher.DispatchController, error: Error): void {
    this.call.failed(this, controller, error)
  }
}

/** A request's attempts, the one kept passed on to its UpstreamCall. */
export class RetryingCall implements UpstreamSide {
  /** The attempt whose callbacks count; null between attempts. */
  private current: Attempt | null = null
  /** Retries made so far. */
  private retries = 0
  /** An answer was kept, or the call given up: no more retries. */
  private settled = false
  /** Where the last attempt went: the next goes elsewhere when it can. */
  private avoid: unknown = null
  private timer: NodeJS.Timeout | null = null
  /** The backoff mayRetry chose for the next attempt, in ms. */
  private nextDelay = 0
  private options: Dispatcher.DispatchOptions
  /** performance.now() past which no attempt starts, and none waits for its head: the route's timeout_ms. */
  private readonly deadline: number

  private readonly inner: UpstreamCall
  private readonly request: FastifyRequest
  private readonly exchange: Exchange
  private readonly route: RetryRoute
  constructor(
    inner: UpstreamCall,
    request: FastifyRequest,
    exchange: Exchange,
    route: RetryRoute,
    options: Dispatcher.DispatchOptions,
  ) {
    this.inner = inner
    this.request = request
    this.exchange = exchange
    this.route = route
    this.options = options
    this.deadline = request.upstreamSentAt + route.timeoutMs
  }

  get broken(): boolean {
    return this.inner.broken
  }

  get sent(): boolean {
    return this.inner.sent
  }

  /** The first attempt: the request counts once in the route's budget. */
  start(): void {
    this.route.budget.request()
    this.send()
  }

  /**
   * Sends an attempt. It waits for its head what is left of the route's timeout (the first: the
   * pool's, all of it), or per_try_timeout_ms when that is shorter.
   */
  private send(): void {
    const left = Math.max(1, Math.ceil(this.deadline - performance.now()))
    const perTryMs = this.route.options.perTryTimeoutMs
    const perTry = perTryMs !== null && perTryMs < left
    if (perTry) this.options = { ...this.options, headersTimeout: perTryMs }
    else if (this.retries > 0) this.options = { ...this.options, headersTimeout: left }
    const attempt = new Attempt(this, perTry)
    this.current = attempt
    this.avoid = this.route.send(this.options, attempt, this.avoid)
  }

  started(attempt: Attempt, controller: Dispatcher.DispatchController): void {
    if (attempt === this.current) this.inner.onRequestStart(controller)
  }

  responseStarted(
    attempt: Attempt,
    controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: IncomingHttpHeaders,
  ): void {
    if (attempt !== this.current) return
    if (statusCode >= 200) {
      const reason = statusCode >= 502 && statusCode <= 504 ? (String(statusCode) as RetryReason) : null
      if (reason !== null && this.mayRetry(reason)) {
        // Its answer is dropped (the connection with it): the client gets the next attempt's.
        this.current = null
        controller.abort(new Error(`the upstream answered ${statusCode}: retried`))
        this.endAttemptSpan(statusCode, reason)
        this.retryLater(reason)
        return
      }
      this.settle()
    }
    this.inner.onResponseStart(controller, statusCode, headers)
  }

  data(attempt: Attempt, controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (attempt === this.current) this.inner.onResponseData(controller, chunk)
  }

  ended(attempt: Attempt, controller: Dispatcher.DispatchController, trailers: IncomingHttpHeaders): void {
    if (attempt === this.current) this.inner.onResponseEnd(controller, trailers)
  }

  failed(attempt: Attempt, controller: Dispatcher.DispatchController, error: Error): void {
    if (attempt !== this.current) return
    if (!this.settled) {
      const reason = failureReason(error, attempt.reached, attempt.perTry)
      if (reason !== null && this.mayRetry(reason)) {
        this.current = null
        this.endAttemptSpan(null, reason)
        this.retryLater(reason)
        return
      }
      this.settle()
      if (reason === 'per_try_timeout') {
        this.inner.onResponseError(controller, new PerTryTimeoutError(this.route.options.perTryTimeoutMs!, error))
        return
      }
    }
    this.inner.onResponseError(controller, error)
  }

  /**
   * Whether a failure of kind `reason` is sent again: retries left, the kind listed, the client
   * still there, the request safe to send twice (an idempotent method or an Idempotency-Key) unless
   * nothing of it reached the upstream, its body there to send again, time left before the
   * route's timeout, and room in the route's budget (asked last: a refusal for another reason
   * takes none of it).
   */
  private mayRetry(reason: RetriedReason): boolean {
    const { options, budget, counters } = this.route
    if (this.settled || this.retries >= options.attempts || !options.on.has(listedAs(reason))) return false
    if (this.exchange.clientGone()) return false
    const request = this.request
    if (reason !== 'connect_failure') {
      if (!IDEMPOTENT.has(request.method) && request.headers['idempotency-key'] === undefined) return false
      // Some of the body may have gone: only a body held whole can go again.
      if (this.options.body != null && !Buffer.isBuffer(this.options.body)) {
        const whole = request.heldBody?.replay() ?? null
        if (whole === null) return false
        this.options = { ...this.options, body: whole }
      }
    }
    // A connect failure took nothing of the body: it goes again as it is (a stream unread, or held).
    const delay = backoffMs(this.retries)
    if (performance.now() + delay >= this.deadline) return false
    if (!budget.tryRetry()) {
      counters.exhausted()
      return false
    }
    this.nextDelay = delay
    return true
  }

  private retryLater(reason: RetriedReason): void {
    this.retries++
    this.route.counters.retried(reason)
    this.timer = setTimeout(() => {
      this.timer = null
      this.startAttemptSpan()
      this.send()
    }, this.nextDelay)
  }

  /**
   * With tracing on, a retried attempt's client span ends with what failed it (its status, if it
   * answered, and the retry's reason as `error.type`); the next attempt gets its own span and a
   * `traceparent` naming it (docs/operations.md, Traces).
   */
  private endAttemptSpan(statusCode: number | null, reason: string): void {
    const span = this.inner.span
    if (span == null) return
    this.inner.span = null
    span.end(statusCode, reason)
  }

  private startAttemptSpan(): void {
    const trace = this.request.trace
    if (trace == null) return
    const span = trace.upstream(this.route.upstreamUrl, this.request.method)
    this.inner.span = span
    this.options = {
      ...this.options,
      headers: { ...(this.options.headers as Record<string, string | string[]>), traceparent: span.traceparent },
    }
  }

  /** No more retries: the attempt under way is the answer, and the held body can go. */
  private settle(): void {
    this.settled = true
    this.request.heldBody?.release()
  }

  /** The client left: a backoff under way ends with it, and the attempt under way is aborted. */
  clientLeft(): void {
    const waiting = this.timer !== null
    if (this.timer !== null) clearTimeout(this.timer)
    this.timer = null
    this.settle()
    this.inner.clientLeft()
    // Between attempts nothing is in flight upstream: the exchange may give its slot back.
    if (waiting) this.exchange.upstreamSettled()
  }
}
