// What one replica holds of a limit (a rate or a quota of one tenant): a lease of units taken from
// Redis, spent from memory until its expiry; or, in embedded mode and while Redis is unusable, a
// state of its own, whose units are reported to Redis once it is back (docs/internals.md, limits).
// Renewing the lease is lease-renewal.ts's; deciding a request, leased-limit.ts's.
import { type LimitContext, type Mode, PROBE_EVERY_MS } from './lease-terms.js'
import type { PolicyName } from './types.js'

export abstract class LeaseHolding {
  mode: Mode = 'cold'
  /** Units held from Redis, spendable until `leaseExpiresAt` (local clock). */
  lease = 0
  leaseExpiresAt = 0
  nextCallAt = 0
  /** Units spent from the lease since the last call was sent: an idle limit then calls, to renew what it keeps. */
  spentSinceSend = 0
  /** Units refunded by the gateway, given back on the next call (never spent again: see docs). */
  refunds = 0
  /** A metered limit's units charged beyond its lease, owed to the shared state with the next call. */
  debt = 0
  /** Counts what may no longer be sent: a quota's month that ended (quota-month.ts). */
  protected generation = 0
  /** Counts the limit's changes (`changed`): a grant to a call sent under older terms is not spent. */
  protected terms = 0
  /** Local mode: the lease held when it began (already taken from Redis), then units to report. */
  prepaid = 0
  unreported = 0
  lastAttemptAt: number
  /** The end of the last answer's wait: when the shared state expects units again. */
  waitUntil = 0
  /** Until then Redis grants nothing to anyone: it was found empty a moment ago (scripts.ts). */
  graceUntil = 0
  /**
   * The last answers said the limit is reached (REACHED_FOR_MS): a dry lease refuses at once and
   * the next lease is fetched in the background, never awaited
   * (docs/internals.md, "A dry lease").
   */
  reached = false
  /** When an answer last could not cover what was asked. */
  protected reachedAt = Number.NEGATIVE_INFINITY
  /** When Redis last answered a lease call of this limit. */
  answeredAt = Number.NEGATIVE_INFINITY

  readonly name: PolicyName
  /**
   * `requests`: the request units of a route's cost, taken when a request is admitted. Else a
   * route meter's, known only when the answer ends: a request passes while the balance is above
   * zero (one unit held), and its units are charged after (`charge`), below zero if need be.
   */
  readonly meter: string
  /** A shadow limit (docs/api.md): counted as an enforced one is, never refusing. Set by the limiter. */
  shadow = false
  protected readonly ctx: LimitContext
  constructor(name: PolicyName, ctx: LimitContext, now: number, meter = 'requests') {
    this.name = name
    this.meter = meter
    this.ctx = ctx
    this.lastAttemptAt = now
  }

  /** The largest lease this limit may hold, whatever the demand. */
  protected abstract cap(): number
  /** The most units it can ever hold at once (a rate's N, a quota's M): a larger cost never passes. */
  protected abstract capacity(): number
  /** Starts the local state from the last known shared one; false when it cannot yet. */
  protected abstract enterLocal(now: number): boolean
  protected abstract localAllows(now: number, units: number): boolean
  protected abstract localTake(now: number, units: number): void
  protected abstract localGiveBack(now: number, units: number): void
  /** Charges units already used to the local state, below zero (a rate) or over M (a quota) too. */
  protected abstract localCharge(now: number, units: number): void

  /** Whether its units are charged when the answer ends (a route meter's), not taken at admission. */
  get chargedAfter(): boolean {
    return this.meter !== 'requests'
  }

  /** Whether the lease can be spent now (held and not expired). */
  held(now: number): number {
    return this.mode === 'shared' && now < this.leaseExpiresAt ? this.lease : 0
  }

  /**
   * The limit itself changed (a new N, W or M): units leased under the old one may not be spent
   * under the new one (a lease of the old N/10 would pass that many over a lowered N), so the lease
   * goes back with the next call and the limit waits for a fresh one, as a cold one does. So does
   * what a call already sent is granted (lease-renewal.ts, `granted`): Redis ran it under the old
   * limit, whatever the mode.
   */
  changed(now: number): void {
    this.terms++
    if (this.mode !== 'shared') return
    this.dropLapsed(now)
    this.refunds += this.held(now)
    this.lease = 0
    this.leaseExpiresAt = 0
    this.nextCallAt = 0
    this.mode = 'cold'
    this.reached = false
  }

  /** Switches modes the shared state forces: Redis down. */
  protected sync(now: number): void {
    if (this.mode !== 'local' && this.ctx.store !== null && this.ctx.redisDown()) this.goLocal(now)
  }

  /**
   * A lease that ran out unspent (a process stalled past its life) is spent no more: what was left
   * of it goes to `lapsed`, once.
   */
  protected dropLapsed(now: number): void {
    if (this.mode !== 'shared' || this.lease <= 0 || now < this.leaseExpiresAt) return
    this.lapsed(this.lease)
    this.lease = 0
  }

  /**
   * Units of a lease that ran out unspent. Redis forgets a rate's lease at its expiry (scripts.ts);
   * a quota's month counts them as used until they are given back (quota-limit.ts).
   */
  protected lapsed(_units: number): void {}

  protected goLocal(now: number): void {
    this.dropLapsed(now)
    const prepaid = this.held(now)
    if (!this.enterLocal(now)) return
    this.prepaid = prepaid
    this.lease = 0
    this.leaseExpiresAt = 0
    this.mode = 'local'
    // What was owed to the shared state is charged here, and reported when Redis is back.
    if (this.debt > 0) {
      this.localCharge(now, this.debt)
      this.reportLocal(this.debt)
      this.debt = 0
    }
    // Redis is asked again in a while, not by every limit at once as it finds Redis down.
    this.nextCallAt = Math.max(this.nextCallAt, now + PROBE_EVERY_MS)
  }

  /** Units spent while local: from what was prepaid (the lease held when it began), the rest reported. */
  protected reportLocal(units: number): void {
    const prepaid = Math.min(this.prepaid, units)
    this.prepaid -= prepaid
    this.unreported += units - prepaid
  }
}
