// A route's `retries` (docs/configuration.md, routes): how many times a failed upstream request is
// sent again, on which failures, within what share of the route's traffic, how much of a request
// body is held to send it again, and how long one attempt may wait for its answer's head. On a
// route with one `upstream` as on one with `targets`.

/**
 * The failures a retry may answer, in Envoy's words: `connect_failure` (no connection, so nothing
 * of the request reached the upstream), `reset` (the connection broke before the answer's head),
 * and the upstream's own 502, 503 and 504.
 */
export type RetryReason = 'connect_failure' | 'reset' | '502' | '503' | '504'

/**
 * Why a retry was made, as tgw_upstream_retries_total's `reason`: the failure's kind, or
 * `per_try_timeout` for an attempt given up after `per_try_timeout_ms` (retried as its 504).
 */
export type RetriedReason = RetryReason | 'per_try_timeout'

export interface RetryOptions {
  /** Retries after the first attempt, 0 to 5 (attempts in all: one more). */
  readonly attempts: number
  /** The failures that are retried. */
  readonly on: ReadonlySet<RetryReason>
  /** Retries are at most this percent of the route's requests over the last 10 s (at least 3). */
  readonly budgetPercent: number
  /** The largest request body held to be sent again, in bytes; a longer one is never retried. */
  readonly bufferBytes: number
  /**
   * How long one attempt waits for its answer's head once its request went out, in ms, below the
   * route's timeout_ms (Envoy's per_try_timeout); null: the rest of timeout_ms. An attempt past it
   * is abandoned, its connection closed, and counts as its 504.
   */
  readonly perTryTimeoutMs: number | null
}

export const RETRY_REASONS: readonly RetryReason[] = ['connect_failure', 'reset', '502', '503', '504']
export const MAX_RETRY_ATTEMPTS = 5
export const MAX_RETRY_BUFFER_BYTES = 16 * 1024 * 1024
const RETRY_KEYS = new Set(['attempts', 'on', 'budget_percent', 'buffer_bytes', 'per_try_timeout_ms'])

/** One retry, on connect_failure alone: safe for any method, since nothing reached the upstream. */
export const DEFAULT_RETRIES: RetryOptions = Object.freeze({
  attempts: 1,
  on: new Set<RetryReason>(['connect_failure']),
  budgetPercent: 20,
  bufferBytes: 65_536,
  perTryTimeoutMs: null,
})

/**
 * The body a route holds for its retries, in bytes: none when it retries only connect failures,
 * which send the body again unread (retry-call.ts), or not at all.
 */
export function heldBodyBytes(retries: RetryOptions): number {
  if (retries.attempts === 0) return 0
  for (const reason of retries.on) if (reason !== 'connect_failure') return retries.bufferBytes
  return 0
}

type Fail = (problem: string) => never

function wholeNumber(field: string, value: unknown, fallback: number, min: number, max: number, fail: Fail): number {
  if (value === undefined) return fallback
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min || value > max)
    fail(`retries.${field} must be a whole number from ${min} to ${max}`)
  return value
}

/** The kinds of `on`, written as YAML gives them (502 as a number or a string). */
function parseOn(value: unknown, fail: Fail): ReadonlySet<RetryReason> {
  if (value === undefined) return DEFAULT_RETRIES.on
  const wrong = `retries.on must be a list of ${RETRY_REASONS.join(', ')}`
  if (!Array.isArray(value)) fail(wrong)
  const on = new Set<RetryReason>()
  for (const item of value) {
    const reason = typeof item === 'number' ? String(item) : item
    if (!RETRY_REASONS.includes(reason as RetryReason)) fail(`${wrong} (not ${JSON.stringify(item)})`)
    on.add(reason as RetryReason)
  }
  return on
}

/** `per_try_timeout_ms`: 1 ms or more, and below the route's `timeoutMs`, or an attempt could never end first. */
function perTryTimeout(value: unknown, timeoutMs: number, fail: Fail): number | null {
  if (value === undefined) return null
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1 || value >= timeoutMs)
    fail(
      `retries.per_try_timeout_ms must be a whole number of ms from 1 to ${timeoutMs - 1}, below the route's ` +
        `timeout_ms (${timeoutMs}); leave it out to let each attempt wait for what is left of timeout_ms`,
    )
  return value
}

/**
 * A route's `retries`, its defaults filled in; `timeoutMs`, the route's timeout_ms, bounds
 * per_try_timeout_ms. `fail` throws route-table.ts's one-line error.
 */
export function parseRetries(value: unknown, timeoutMs: number, fail: Fail): RetryOptions {
  if (value === undefined) return DEFAULT_RETRIES
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    fail('retries must be a mapping with attempts, on, budget_percent, buffer_bytes and per_try_timeout_ms')
  const entry = value as Record<string, unknown>
  for (const key of Object.keys(entry))
    if (!RETRY_KEYS.has(key)) fail(`retries: unknown key "${key}" (allowed: ${[...RETRY_KEYS].join(', ')})`)
  const attempts = wholeNumber('attempts', entry.attempts, DEFAULT_RETRIES.attempts, 0, MAX_RETRY_ATTEMPTS, fail)
  // A route without retries has no attempts to time: its one request has timeout_ms alone.
  if (attempts === 0 && entry.per_try_timeout_ms !== undefined)
    fail('retries.per_try_timeout_ms needs attempts of 1 or more; without retries, lower timeout_ms instead')
  return Object.freeze({
    attempts,
    on: parseOn(entry.on, fail),
    budgetPercent: wholeNumber('budget_percent', entry.budget_percent, DEFAULT_RETRIES.budgetPercent, 0, 100, fail),
    bufferBytes: wholeNumber(
      'buffer_bytes',
      entry.buffer_bytes,
      DEFAULT_RETRIES.bufferBytes,
      0,
      MAX_RETRY_BUFFER_BYTES,
      fail,
    ),
    perTryTimeoutMs: perTryTimeout(entry.per_try_timeout_ms, timeoutMs, fail),
  })
}
