// One limit (a rate or a quota of one tenant) as one replica decides on it: from the lease it holds
// or its local state (lease-holding.ts), renewed in the background (lease-renewal.ts), never
// waiting for Redis unless the limit is cold or starved (docs/internals.md, limits). The
// subclasses say what a unit is.
import { LeaseRenewal } from './lease-renewal.js'
import { REACHED_FOR_MS } from './lease-terms.js'
import type { PolicyState } from './types.js'

export abstract class LeasedLimit extends LeaseRenewal {
  abstract state(now: number): PolicyState
  /** When refused a request of `units`: ms until this limit would let it pass (at least 1 s is answered). */
  abstract retryAfterMs(now: number, units: number): number

  /** A request of `units` can never pass this limit: it is refused at once, and asks nothing of Redis. */
  private neverPasses(units: number): boolean {
    return units > this.capacity()
  }

  /**
   * Whether `units` (a request's cost: 1 unless its route says more) may be taken now. Counts
   * them for the lease's sizing.
   */
  allows(now: number, units = 1): boolean {
    if (this.neverPasses(units)) return false
    this.demand.ask(units)
    this.lastAttemptAt = now
    this.sync(now)
    if (this.mode === 'shared') return this.lease >= units && now < this.leaseExpiresAt
    if (this.mode === 'local') return this.localAllows(now, units)
    return false
  }

  take(now: number, units = 1): void {
    if (this.mode === 'shared') {
      this.lease -= units
      this.spentSinceSend += units
      return
    }
    this.localTake(now, units)
    this.reportLocal(units)
  }

  /**
   * A metered answer's units, once it ended: taken from the lease as far as it goes, the rest owed
   * to the shared state with the next call (which may leave it below zero: the debt the docs
   * bound). Cold, with nothing held, all of it is owed.
   */
  charge(now: number, units: number): void {
    if (units <= 0) return
    this.demand.count(units)
    this.sync(now)
    if (this.mode === 'local') {
      this.localCharge(now, units)
      this.reportLocal(units)
      return
    }
    const fromLease = Math.min(this.held(now), units)
    this.lease -= fromLease
    this.spentSinceSend += fromLease
    this.debt += units - fromLease
  }

  giveBack(now: number, units = 1): void {
    if (this.mode === 'shared') this.refunds += units
    else if (this.mode === 'local') {
      this.localGiveBack(now, units)
      this.unreported -= Math.min(this.unreported, units)
    }
  }

  /**
   * Whether forgetting the limit now would lose something: units owed to Redis (a debt, or what it
   * admitted on its own), or units to give back (a local limit's go only with its next call). A
   * subclass adds what its local state holds that a new one would not.
   */
  holdsState(_now: number): boolean {
    return this.debt > 0 || this.unreported > 0 || this.refunds > 0
  }

  /**
   * Shared, its lease spent, and the limit not known to be reached: a burst emptied the lease
   * while Redis has units (after an idle second the lease is down to one unit). A request then
   * waits for a renewal (limiter.warm), as a cold limit's first one does, rather than being
   * refused a unit the limit still has. A limit that is reached is never starved: past its rate, a
   * request is served from a lease fetched ahead or refused at once, so that in steady traffic no
   * request waits for Redis, however often the lease runs dry. Reached is a recent word only: a
   * client that stopped when refused, and comes back after its Retry-After, finds the bucket
   * refilled while no call went out to say so, and its first request waits for one.
   */
  starved(now: number, units = 1): boolean {
    return (
      this.mode === 'shared' &&
      !this.neverPasses(units) &&
      !(this.reached && now - this.reachedAt < REACHED_FOR_MS) &&
      this.held(now) < units &&
      now >= this.waitUntil &&
      now >= this.graceUntil
    )
  }

  /**
   * Whether a request can be decided from memory now: the limit has had its first answer (a lease,
   * or a local state) and is not starved. Brings the limit up to date first, as `allows` would: a
   * quota in a new month is cold, and its first request waits rather than being refused.
   */
  ready(now: number, units = 1): boolean {
    this.sync(now)
    return this.mode !== 'cold' && !this.starved(now, units)
  }

  /**
   * Whether its units come back with time (a rate's bucket): a renewal answered while a request
   * waited, and gone to the requests ahead (or to the debt of answers that ended meanwhile), then
   * says the limit is spent for now. A quota's or credits' units do not: one of 10^12 is spent only
   * when an answer could not cover what was asked (`reached`), never because a slow process found
   * its lease dry again (limit-waits.ts).
   */
  refillsInTime(): boolean {
    return false
  }

  /** A request waits for units: counts as demand (so the lease is not kept idle-small) and asks for them. */
  ask(now: number, units = 1): void {
    if (this.neverPasses(units)) return
    this.demand.ask(units)
    this.asks += units
    this.lastAttemptAt = now
    this.maintain(now)
  }
}

/** What a request asks of a limit: its cost, or of a route meter's, one unit held (a balance above zero). */
export const asked = (limit: LeasedLimit, units: number): number => (limit.chargedAfter ? 1 : units)
