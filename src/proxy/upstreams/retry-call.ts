// A proxied request's retries (docs/configuration.md, routes: `retries`): an undici handler between
// the route's dispatcher and the request's UpstreamCall (upstream-call.ts). Each attempt has its
// own small handler (retry-attempt.ts), so that the callbacks of an attempt given up never reach
// the client. The call passes on the attempt it keeps; until then a failure the rules
// (retry-rules.ts) allow is sent again, after a jittered backoff, to another target when the route
// has several. With `per_try_timeout_ms`, each attempt waits for its head no longer than that
// (undici's headersTimeout, whose expiry closes the connection): a hung target costs a try, not the
// request. The request counts once whatever its attempts (the exchange and fastify see one
// request); passive health hears every attempt, as each goes through its target's handler
// (target-call.ts).
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http'
import { performance } from 'node:perf_hooks'
import type { FastifyRequest } from 'fastify'
import type { Dispatcher } from 'undici'
import type { Exchange, UpstreamSide } from '../exchange.js'
import type { UpstreamCall } from '../upstream-call.js'
import { PerTryTimeoutError } from './per-try-timeout.js'
import { Attempt, type AttemptOwner } from './retry-attempt.js'
import type { RetryBudget } from './retry-budget.js'
import type { RetriedReason, RetryOptions } from './retry-options.js'
import { backoffMs, failureReason, listedAs, safeToSendTwice, statusReason } from './retry-rules.js'

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
  readonly options: RetryOptions
  readonly timeoutMs: number
  readonly budget: RetryBudget
  readonly counters: RetryCounters
  readonly send: SendAttempt
}

/** A request's attempts, the one kept passed on to its UpstreamCall. */
export class RetryingCall implements UpstreamSide, AttemptOwner {
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
    this.inner.dispatched(this.options.headers as OutgoingHttpHeaders)
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
      const reason = statusReason(statusCode)
      if (reason !== null && this.mayRetry(reason)) {
        // Its answer is dropped (the connection with it): the client gets the next attempt's.
        this.current = null
        controller.abort(new Error(`the upstream answered ${statusCode}: retried`))
        this.inner.attemptRetried(statusCode, reason)
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
        this.inner.attemptRetried(null, reason)
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
    if (reason !== 'connect_failure') {
      if (!safeToSendTwice(this.request)) return false
      // Some of the body may have gone: only a body held whole can go again.
      if (this.options.body != null && !Buffer.isBuffer(this.options.body)) {
        const whole = this.request.heldBody?.replay() ?? null
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

  /** After the backoff, the next attempt, with a client span of its own when tracing is on. */
  private retryLater(reason: RetriedReason): void {
    this.retries++
    this.route.counters.retried(reason)
    this.timer = setTimeout(() => {
      this.timer = null
      // The attempt given up was dispatched with these headers, and is over: they carry the next.
      this.inner.startSpan(this.options.headers as OutgoingHttpHeaders)
      this.send()
    }, this.nextDelay)
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
