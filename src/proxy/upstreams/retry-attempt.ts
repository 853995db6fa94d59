// One attempt of a retried request (retry-call.ts): an undici handler of its own, so that the
// callbacks of an attempt given up (a 503 whose answer is dropped) can be told from the kept
// one's, and never reach the client. It passes each callback on to its owner, naming itself.
import type { IncomingHttpHeaders } from 'node:http'
import type { Dispatcher } from 'undici'

/** What an attempt hands its callbacks to: the request's RetryingCall. */
export interface AttemptOwner {
  started(attempt: Attempt, controller: Dispatcher.DispatchController): void
  responseStarted(
    attempt: Attempt,
    controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: IncomingHttpHeaders,
  ): void
  data(attempt: Attempt, controller: Dispatcher.DispatchController, chunk: Buffer): void
  ended(attempt: Attempt, controller: Dispatcher.DispatchController, trailers: IncomingHttpHeaders): void
  failed(attempt: Attempt, controller: Dispatcher.DispatchController, error: Error): void
}

/** One attempt's callbacks, handed to the call with the attempt they belong to. */
export class Attempt implements Dispatcher.DispatchHandler {
  /** Its request went out on a connection (undici's onRequestStart). */
  reached = false
  /** Its headers timeout is per_try_timeout_ms (shorter than what was left of timeout_ms). */
  readonly perTry: boolean
  private readonly owner: AttemptOwner
  constructor(owner: AttemptOwner, perTry: boolean) {
    this.owner = owner
    this.perTry = perTry
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.reached = true
    this.owner.started(this, controller)
  }

  onResponseStart(controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    this.owner.responseStarted(this, controller, statusCode, headers)
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    this.owner.data(this, controller, chunk)
  }

  onResponseEnd(controller: Dispatcher.DispatchController, trailers: IncomingHttpHeaders): void {
    this.owner.ended(this, controller, trailers)
  }

  onResponseError(controller: Dispatcher.DispatchController, error: Error): void {
    this.owner.failed(this, controller, error)
  }
}
