// A route's `retries.per_try_timeout_ms` (docs/configuration.md, Retries): an attempt that waited
// that long for its answer's head is given up (undici's headersTimeout closes its connection) and
// counts as its 504. When it is not retried, the client's 504 names the time it had.

/** undici's failure of a request that waited out its headersTimeout. */
export const HEADERS_TIMEOUT = 'UND_ERR_HEADERS_TIMEOUT'

/**
 * An attempt that waited out per_try_timeout_ms and is not retried (retry-call.ts), as the
 * client's 504 names it (upstream-call.ts): a headers timeout, `timeoutMs` long, undici's as cause.
 */
export class PerTryTimeoutError extends Error {
  readonly code = HEADERS_TIMEOUT
  readonly timeoutMs: number
  constructor(timeoutMs: number, cause: Error) {
    super(`no answer's head within retries.per_try_timeout_ms (${timeoutMs} ms)`, { cause })
    this.timeoutMs = timeoutMs
  }
}
