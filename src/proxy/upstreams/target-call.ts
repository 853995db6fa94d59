// The balancer's handler around each request sent to a target (route-upstreams.ts): it counts the
// target's requests in flight (least_request reads them) and tells passive health (outlier.ts) how
// each ended. It wraps the request's own handler (upstream-call.ts, or a retry's attempt) and
// passes every callback on unchanged.
import type { IncomingHttpHeaders } from 'node:http'
import type { Dispatcher } from 'undici'
import type { Outcome } from './outlier.js'

/**
 * Failures that are the target's: it could not be reached, reset the connection, or did not
 * answer in time. An abort of the gateway's own (the client left) or a request body's failure
 * carries none of these codes, and says nothing of the target.
 */
const TARGET_FAULTS = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'UND_ERR_SOCKET',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
])

/** How a request that failed before or during its answer speaks of its target. */
export function errorOutcome(error: Error): Outcome {
  const code = (error as { code?: string }).code ?? (error as { cause?: { code?: string } }).cause?.code
  return code !== undefined && TARGET_FAULTS.has(code) ? 'failure' : 'neutral'
}

/** A status of the target's own that counts as its failure (502, 503, 504). */
export function statusOutcome(status: number): Outcome {
  return status >= 502 && status <= 504 ? 'failure' : 'success'
}

/** What the handler tells its target of a request's end. */
export interface TargetAccount {
  inFlight: number
  /** The request's answer began (its status known) or it failed: once per request. */
  settled(outcome: Outcome): void
}

/** A request's handler, wrapped: the callbacks pass through, the target learns how it ended. */
export class TargetCall implements Dispatcher.DispatchHandler {
  /** The outcome was told; the request may still be under way (its body streaming). */
  private told = false
  /** Its answer ended or failed: the target has one request fewer in flight. */
  private over = false

  private readonly inner: Dispatcher.DispatchHandler
  private readonly target: TargetAccount
  constructor(inner: Dispatcher.DispatchHandler, target: TargetAccount) {
    this.inner = inner
    this.target = target
  }

  private tell(outcome: Outcome): void {
    if (this.told) return
    this.told = true
    this.target.settled(outcome)
  }

  private end(): void {
    if (this.over) return
    this.over = true
    this.target.inFlight--
  }

  onRequestStart(controller: Dispatcher.DispatchController, context: unknown): void {
    this.inner.onRequestStart?.(controller, context)
  }

  onResponseStart(
    controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: IncomingHttpHeaders,
    statusMessage?: string,
  ): void {
    if (statusCode >= 200) this.tell(statusOutcome(statusCode))
    this.inner.onResponseStart?.(controller, statusCode, headers, statusMessage)
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    this.inner.onResponseData?.(controller, chunk)
  }

  onResponseEnd(controller: Dispatcher.DispatchController, trailers: IncomingHttpHeaders): void {
    this.end()
    this.inner.onResponseEnd?.(controller, trailers)
  }

  onResponseError(controller: Dispatcher.DispatchController, error: Error): void {
    this.tell(errorOutcome(error))
    this.end()
    this.inner.onResponseError?.(controller, error)
  }
}
