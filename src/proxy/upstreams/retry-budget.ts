// A route's retry budget (docs/configuration.md, routes: `retries.budget_percent`): retries are at
// most a share of the route's requests over the last 10 s, and at least MIN_RETRIES in any 10 s
// whatever the share, so that a failing upstream is not hit with multiplied load, and a quiet
// route can still retry. Envoy's retry budget and Finagle's RetryBudget do the same.
//
// Ten one-second buckets in two fixed arrays: the memory is the same (20 numbers a route) however
// many requests come, and a request costs one clock read and an increment.

export const BUDGET_WINDOW_MS = 10_000
const BUCKETS = 10
const BUCKET_MS = BUDGET_WINDOW_MS / BUCKETS
/** Retries allowed in any window whatever the share. */
export const MIN_RETRIES = 3

export class RetryBudget {
  private readonly requests = new Float64Array(BUCKETS)
  private readonly retries = new Float64Array(BUCKETS)
  /** The second (clock / BUCKET_MS) the newest bucket holds. */
  private second = 0
  private readonly percent: number
  private readonly clock: () => number
  /** `percent`: 0 to 100; `clock` in ms (default Date.now). */
  constructor(percent: number, clock: () => number = Date.now) {
    this.percent = percent
    this.clock = clock
    this.second = Math.floor(clock() / BUCKET_MS)
  }

  /** Moves the window to now: the buckets of seconds gone by are emptied. */
  private advance(): number {
    const now = Math.floor(this.clock() / BUCKET_MS)
    // A clock set back counts into the newest bucket until it catches up.
    if (now <= this.second) return this.second % BUCKETS
    const gone = Math.min(now - this.second, BUCKETS)
    for (let i = 1; i <= gone; i++) {
      const at = (this.second + i) % BUCKETS
      this.requests[at] = 0
      this.retries[at] = 0
    }
    this.second = now
    return now % BUCKETS
  }

  /** A request of the route was sent upstream (its first attempt). */
  request(): void {
    this.requests[this.advance()]!++
  }

  /** Takes one retry from the budget: false when the window's share is spent. */
  tryRetry(): boolean {
    const at = this.advance()
    let requests = 0
    let retries = 0
    for (let i = 0; i < BUCKETS; i++) {
      requests += this.requests[i]!
      retries += this.retries[i]!
    }
    const allowed = Math.max(MIN_RETRIES, Math.floor((requests * this.percent) / 100))
    if (retries >= allowed) return false
    this.retries[at]!++
    return true
  }
}
