// Which failed attempts may be sent again, and when (docs/configuration.md, routes: `retries`):
// plain functions of the failure and the request, no state. The call that applies them to one
// request's attempts is retry-call.ts.
import type { FastifyRequest } from 'fastify'
import type { RetriedReason, RetryReason } from './retry-options.js'
import { HEADERS_TIMEOUT } from './per-try-timeout.js'
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

/** The retry reason of an answer's status: 502, 503 and 504 may be listed in `on`; null for any other. */
export function statusReason(statusCode: number): RetryReason | null {
  return statusCode >= 502 && statusCode <= 504 ? (String(statusCode) as RetryReason) : null
}

/** The kind of `on` a retry reason stands for: a per-try timeout is its attempt's 504. */
export function listedAs(reason: RetriedReason): RetryReason {
  return reason === 'per_try_timeout' ? '504' : reason
}

/**
 * Whether the request may reach the upstream twice: an idempotent method, or an Idempotency-Key
 * with a value (an empty or blank one names nothing the upstream could know the write again by).
 */
export function safeToSendTwice(request: FastifyRequest): boolean {
  if (IDEMPOTENT.has(request.method)) return true
  const key = request.headers['idempotency-key']
  return typeof key === 'string' && key.trim() !== ''
}
