// The arithmetic of a rate limit (docs/decisions/0108-leases-not-a-redis-call-per-request.md): a
// token bucket of capacity N that refills at N per W seconds, so that over any t seconds at most
// N + N·t/W requests pass. Plain functions over a state, so that the in-process limiter and the
// Redis script (which repeats these lines in Lua) agree, and so that both are tested without a
// clock or a server.

export interface Rate {
  /** N: the bucket's capacity, and what it refills over `perSeconds`. */
  readonly requests: number
  /** W, in seconds. */
  readonly perSeconds: number
}

/** The tokens in a bucket at an instant (ms). Tokens are fractional: refills are continuous. */
export interface BucketState {
  readonly tokens: number
  readonly at: number
}

/** A full bucket at `now`: what a limit starts with. */
export function fullBucket(rate: Rate, now: number): BucketState {
  return { tokens: rate.requests, at: now }
}

/** Tokens refilled per millisecond. */
function perMs(rate: Rate): number {
  return rate.requests / (rate.perSeconds * 1000)
}

/** The bucket's tokens at `now`: refilled for the time since its state, never above capacity. A clock that went back refills nothing. */
export function tokensAt(state: BucketState, rate: Rate, now: number): number {
  if (now <= state.at) return state.tokens
  return Math.min(rate.requests, state.tokens + (now - state.at) * perMs(rate))
}

/** The bucket at `now` (`tokensAt`, as a state). */
export function refill(state: BucketState, rate: Rate, now: number): BucketState {
  if (now <= state.at) return state
  return { tokens: tokensAt(state, rate, now), at: now }
}

/** Takes up to `wanted` whole tokens at `now`: how many it got, and the bucket after. */
export function take(
  state: BucketState,
  rate: Rate,
  now: number,
  wanted: number,
): { granted: number; state: BucketState } {
  const current = refill(state, rate, now)
  const granted = Math.max(0, Math.min(Math.floor(wanted), Math.floor(current.tokens)))
  return { granted, state: { tokens: current.tokens - granted, at: current.at } }
}

/**
 * Charges `units` already used (a metered answer's, known at its end): below zero too, down to
 * -N, as the Redis script does, so that the debt is refilled before anything passes again.
 */
export function charge(state: BucketState, rate: Rate, now: number, units: number): BucketState {
  const current = refill(state, rate, now)
  return { tokens: Math.max(-rate.requests, current.tokens - units), at: current.at }
}

/** Gives back `tokens` taken and not used, never above capacity (what is over is lost, never created). */
export function giveBack(state: BucketState, rate: Rate, now: number, tokens: number): BucketState {
  const current = refill(state, rate, now)
  return { tokens: Math.min(rate.requests, current.tokens + Math.max(0, tokens)), at: current.at }
}

/** Milliseconds from `now` until `n` whole tokens are in the bucket (0 if they are); Infinity past capacity. */
export function msUntil(state: BucketState, rate: Rate, now: number, n = 1): number {
  if (n > rate.requests) return Number.POSITIVE_INFINITY
  const current = refill(state, rate, now)
  const missing = n - current.tokens
  return missing <= 0 ? 0 : Math.ceil(missing / perMs(rate))
}
