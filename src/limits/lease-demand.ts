// How large a lease one replica asks for (leased-limit.ts): its recent demand for a limit's units,
// sampled and smoothed, to cover LEASE_HORIZON_MS of it, never less than the largest request seen.
import { LEASE_HORIZON_MS } from './lease-terms.js'

export class LeaseDemand {
  /** Units asked since the last sample. */
  private attempts = 0
  private sampledAt: number
  private perMs = -1
  /** The most units one request asked of this limit so far (a route's cost): a lease covers at least that. */
  largestAsk = 1
  constructor(now: number) {
    this.sampledAt = now
  }

  /** Units asked or charged: demand, for the next sample. */
  count(units: number): void {
    this.attempts += units
  }

  /** One request's units: demand, and the largest ask if it is. */
  ask(units: number): void {
    this.attempts += units
    if (units > this.largestAsk) this.largestAsk = units
  }

  /** The largest lease, at least the largest request seen (a cost above the cap would never pass). */
  cap(limitCap: number): number {
    return Math.max(limitCap, this.largestAsk)
  }

  /** The lease size the recent demand calls for, between the largest ask and the cap. */
  target(now: number, limitCap: number): number {
    const elapsed = now - this.sampledAt
    if (elapsed >= 20) {
      const observed = this.attempts / elapsed
      this.perMs = this.perMs < 0 ? observed : (observed + this.perMs) / 2
      this.attempts = 0
      this.sampledAt = now
    }
    const cap = this.cap(limitCap)
    const wanted = this.perMs < 0 ? cap : Math.ceil(this.perMs * LEASE_HORIZON_MS)
    return Math.max(this.largestAsk, Math.min(cap, wanted))
  }
}
