// One limit (a rate or a quota of one tenant) as one replica holds it: a lease of units taken from
// Redis, spent from memory, renewed in the background; or, in embedded mode and while Redis is
// unusable, a state of its own (docs/internals.md, limits). The subclasses say what a unit is.
import type { LeaseStore } from './lease-store.js'

/** What one lease call carries (lease-store.ts). */
export interface LeaseCall {
  keep: number
  returned: number
  wanted: number
  extra: number
  /** A metered limit's units charged beyond its lease since the last call (`charge`). */
  debt: number
}

import type { LimiterMetrics, PolicyName, PolicyState } from './types.js'

export interface LimitContext {
  /** null: embedded mode, every limit is local for good. */
  store: LeaseStore | null
  now(): number
  /**
   * How long ago (ms) the oldest count this replica's usage meter has not written to Postgres was
   * made (0: all written): a quota's month rebuilt from Postgres misses what was counted since.
   */
  unwrittenForMs(): number
  /** Has the usage meter write what it counted (before a month is read from Postgres); never rejects. */
  writeUsage(): Promise<void>
  /** Whether Redis failed lately: shared limits switch to their local state. */
  redisDown(): boolean
  failed(): void
  answered(): void
  metrics: LimiterMetrics
}

/** Past this without a request, a lease shrinks to one unit (others may need the rest). */
export const IDLE_SHRINK_MS = 1_000
/** Past this without a request, the lease is given back and the limit forgotten. */
export const FORGET_AFTER_MS = 10_000
/** While Redis is unusable, each limit asks it again this often. */
export const PROBE_EVERY_MS = 1_000
/** A lease is sized to cover this much of the replica's recent demand. */
export const LEASE_HORIZON_MS = 100
/** After an empty answer, the next call waits at least this long. */
const MIN_RETRY_MS = 10
/**
 * A limit found at its limit (an answer that could not cover what was asked: a rate's bucket
 * drained, a quota's month spent) is taken to be there until an answer that could comes this long
 * after the last that could not: a moment's stall, after which one call finds the refill of the
 * stall, says nothing of a client that is still past its rate.
 */
export const REACHED_FOR_MS = 1_000

export type Mode = 'cold' | 'shared' | 'local'

/** What every lease answer says. */
export interface Grant {
  granted: number
  waitMs: number
  inGrace: boolean
}

export abstract class LeasedLimit {
  mode: Mode = 'cold'
  /** Units held from Redis, spendable until `leaseExpiresAt` (local clock). */
  lease = 0
  leaseExpiresAt = 0
  inflight = false
  nextCallAt = 0
  /** Units spent from the lease since the last call was sent: an idle limit then calls, to renew what it keeps. */
  spentSinceSend = 0
  /** Units refunded by the gateway, given back on the next call (never spent again: see docs). */
  refunds = 0
  /** A metered limit's units charged beyond its lease, owed to the shared state with the next call. */
  debt = 0
  /** Counts what may no longer be sent: a quota's month that ended (quota-limit.ts). */
  protected generation = 0
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
  private reachedAt = Number.NEGATIVE_INFINITY
  /** When Redis last answered a lease call of this limit. */
  answeredAt = Number.NEGATIVE_INFINITY
  /** The call (or Postgres read) under way, for `settled()`. */
  protected pending: Promise<unknown> | null = null
  private attempts = 0
  /** Requests waiting for units since the last call was sent: the next lease covers them all. */
  private asks = 0
  /** What the call under way asked for: an answer granting none of it says the limit is spent. */
  private wantedInCall = 0
  private sampledAt: number
  private demandPerMs = -1
  /** The most units one request asked of this limit so far (a route's cost): a lease covers at least that. */
  private largestAsk = 1

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
    this.sampledAt = now
  }

  /** The largest lease this limit may hold, whatever the demand. */
  protected abstract cap(): number
  /** The most units it can ever hold at once (a rate's N, a quota's M): a larger cost never passes. */
  protected abstract capacity(): number
  /** Sends one lease call and applies its answer; rejects when Redis failed (not when Postgres did). */
  protected abstract call(now: number, lease: LeaseCall): Promise<void>
  /** Starts the local state from the last known shared one; false when it cannot yet. */
  protected abstract enterLocal(now: number): boolean
  protected abstract localAllows(now: number, units: number): boolean
  protected abstract localTake(now: number, units: number): void
  protected abstract localGiveBack(now: number, units: number): void
  /** Charges units already used to the local state, below zero (a rate) or over M (a quota) too. */
  protected abstract localCharge(now: number, units: number): void
  abstract state(now: number): PolicyState
  /** When refused a request of `units`: ms until this limit would let it pass (at least 1 s is answered). */
  abstract retryAfterMs(now: number, units: number): number

  /** The largest lease, at least the largest request seen (a cost above the cap would never pass). */
  private leaseCap(): number {
    return Math.max(this.cap(), this.largestAsk)
  }

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
    this.attempts += units
    if (units > this.largestAsk) this.largestAsk = units
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

  /** Whether its units are charged when the answer ends (a route meter's), not taken at admission. */
  get chargedAfter(): boolean {
    return this.meter !== 'requests'
  }

  /**
   * A metered answer's units, once it ended: taken from the lease as far as it goes, the rest owed
   * to the shared state with the next call (which may leave it below zero: the debt the docs
   * bound). Cold, with nothing held, all of it is owed.
   */
  charge(now: number, units: number): void {
    if (units <= 0) return
    this.attempts += units
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

  /** Units spent while local: from what was prepaid (the lease held when it began), the rest reported. */
  private reportLocal(units: number): void {
    const prepaid = Math.min(this.prepaid, units)
    this.prepaid -= prepaid
    this.unreported += units - prepaid
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
   * admitted on its own). A subclass adds what its local state holds that a new one would not.
   */
  holdsState(_now: number): boolean {
    return this.debt > 0 || this.unreported > 0
  }

  /** Whether an answer is under way: a lease call (or, for a quota, its month read from Postgres). */
  awaitingAnswer(): boolean {
    return this.inflight
  }

  /** Resolves once the call under way, if any, is over (never rejects). */
  async settled(): Promise<void> {
    await this.pending?.catch(() => {})
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

  /** A request waits for units: counts as demand (so the lease is not kept idle-small) and asks for them. */
  ask(now: number, units = 1): void {
    if (this.neverPasses(units)) return
    this.attempts += units
    this.asks += units
    if (units > this.largestAsk) this.largestAsk = units
    this.lastAttemptAt = now
    this.maintain(now)
  }

  /** Whether the lease can be spent now (held and not expired). */
  held(now: number): number {
    return this.mode === 'shared' && now < this.leaseExpiresAt ? this.lease : 0
  }

  /**
   * The limit itself changed (a new N, W or M): units leased under the old one may not be spent
   * under the new one (a lease of the old N/10 would pass that many over a lowered N), so the lease
   * goes back with the next call and the limit waits for a fresh one, as a cold one does.
   */
  changed(now: number): void {
    if (this.mode !== 'shared') return
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

  protected goLocal(now: number): void {
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

  /** The lease size this replica's recent demand calls for, between 1 and the cap. */
  target(now: number): number {
    const elapsed = now - this.sampledAt
    if (elapsed >= 20) {
      const observed = this.attempts / elapsed
      this.demandPerMs = this.demandPerMs < 0 ? observed : (observed + this.demandPerMs) / 2
      this.attempts = 0
      this.sampledAt = now
    }
    const cap = this.leaseCap()
    const wanted = this.demandPerMs < 0 ? cap : Math.ceil(this.demandPerMs * LEASE_HORIZON_MS)
    return Math.max(this.largestAsk, Math.min(cap, wanted))
  }

  /** Starts a lease call in the background if this limit needs one now. Never waits. */
  maintain(now: number): void {
    const store = this.ctx.store
    if (store === null || this.inflight || now < this.nextCallAt) return
    const again = this.unanswered()
    if (again !== null) {
      void this.dispatch(now, again)
      return
    }
    if (this.mode !== 'shared') {
      const extra = this.mode === 'local' ? this.unreported : 0
      this.unreported -= extra
      this.send(now, 0, 0, this.target(now), extra)
      return
    }
    const held = this.held(now)
    if (held === 0) this.lease = 0
    const idle = now - this.lastAttemptAt >= IDLE_SHRINK_MS
    if (idle) {
      const keep = Math.min(held, 1)
      // The largest cost seen sized the lease while requests came; idle, it no longer does.
      this.largestAsk = 1
      const halfLife = keep > 0 && now >= this.leaseExpiresAt - store.ttlMs / 2
      if (held > keep || this.refunds > 0 || this.spentSinceSend > 0 || this.debt > 0 || halfLife) {
        this.lease = keep
        // A metered limit whose last unit an answer's charge took asks for one again: else the
        // next request, after a long answer, would wait for Redis (while the balance is above 0).
        this.send(now, keep, held - keep, this.chargedAfter && keep === 0 ? 1 : 0, 0)
      }
      return
    }
    const target = Math.max(this.target(now), Math.min(this.leaseCap(), this.asks))
    const extra = this.unreported
    // Also when a request waits for more than is held (a cost above what is left of the lease).
    if (
      held <= Math.floor(target / 2) ||
      held < this.asks ||
      now >= this.leaseExpiresAt - store.ttlMs / 2 ||
      extra > 0 ||
      this.debt > 0
    ) {
      this.unreported = 0
      this.send(now, held, 0, Math.max(0, target - held), extra)
    }
  }

  /**
   * A call sent whose answer did not come, to be sent again as it was before any other (a quota's:
   * quota-limit.ts); null: none, or the limit's units go with the next call instead (`failedCall`).
   */
  protected unanswered(): LeaseCall | null {
    return null
  }

  /**
   * A call failed (Redis did not answer in time): its units are added to the next call's. Units
   * admitted while local are counted again rather than lost: under, never over (a rate's bucket
   * refills what a second report took). A quota sends the call again instead (quota-limit.ts).
   */
  protected failedCall(call: LeaseCall): void {
    this.unreported += call.extra
    this.debt += call.debt
  }

  /** A new call, as the subclass sends it (a quota names its report: quota-limit.ts). */
  protected prepared(call: LeaseCall): LeaseCall {
    return call
  }

  /** Gives back the whole lease (closing, or forgetting an idle limit). */
  async release(now: number): Promise<void> {
    if (this.ctx.store === null || this.mode !== 'shared' || this.inflight || this.unanswered() !== null) return
    const held = this.held(now)
    if (held === 0 && this.refunds === 0 && this.debt === 0) return
    this.lease = 0
    await this.send(now, 0, held, 0, 0)
  }

  private send(now: number, keep: number, returned: number, wanted: number, extra: number): Promise<void> {
    const call = {
      keep,
      returned: returned + this.refunds,
      wanted,
      extra,
      debt: this.debt,
    }
    this.debt = 0
    this.refunds = 0
    this.spentSinceSend = 0
    this.asks = 0
    if (call.returned > 0) this.ctx.metrics.unitsReturned?.inc(call.returned)
    return this.dispatch(now, this.prepared(call))
  }

  /** Sends `call` (a new one, or one unanswered sent again) and applies its answer or failure. */
  private dispatch(now: number, call: LeaseCall): Promise<void> {
    this.inflight = true
    const generation = this.generation
    this.wantedInCall = call.wanted
    this.ctx.metrics.leaseRequests?.inc()
    const sent = this.call(now, call)
      .then(
        () => {},
        () => {
          this.ctx.metrics.leaseFailures?.inc()
          // Not into another month: its count is its own.
          if (generation === this.generation) this.failedCall(call)
          this.ctx.failed()
          this.nextCallAt = now + PROBE_EVERY_MS
          if (this.mode !== 'local') this.goLocal(now)
        },
      )
      .finally(() => {
        this.inflight = false
      })
    this.pending = sent
    return sent
  }

  /**
   * Applies a grant to a call sent at `sentAt` that kept `keep`: what is left of the kept units
   * (spent meanwhile from `lease`) and the grant are valid for one lease life from the sending.
   */
  protected granted(sentAt: number, now: number, answer: Grant, ttlMs: number): void {
    const { granted, waitMs } = answer
    this.answeredAt = now
    if (this.mode === 'local' && answer.inGrace) {
      // Redis came back empty: no replica can lease yet, and each goes on on its own meanwhile
      // (degraded), rather than refusing everything for the grace.
      this.nextCallAt = now + Math.min(PROBE_EVERY_MS, Math.max(MIN_RETRY_MS, waitMs))
      return
    }
    this.ctx.answered()
    if (this.mode !== 'shared') {
      this.lease = 0
      this.prepaid = 0
      this.mode = 'shared'
    }
    this.lease += granted
    if (granted > 0) this.ctx.metrics.unitsTaken?.inc(granted)
    // A debt charged while this call was out is paid from the grant first: the units are owed,
    // and admitting on them would pass a request past a balance this replica knows is spent.
    if (this.debt > 0) {
      const paid = Math.min(this.lease, this.debt)
      this.lease -= paid
      this.debt -= paid
      this.spentSinceSend += paid
    }
    this.leaseExpiresAt = this.lease > 0 ? sentAt + ttlMs : 0
    this.graceUntil = answer.inGrace ? now + waitMs : 0
    this.noteReached(now, answer, granted < this.wantedInCall)
    this.nextCallAt = granted === 0 ? now + Math.min(PROBE_EVERY_MS, Math.max(MIN_RETRY_MS, waitMs)) : 0
    // Units asked for and none granted: the limit is spent (reached, above), and a refusal's
    // Retry-After counts at least to the next call, even when the answer names no wait (a quota's
    // month is spent until other replicas give units back, or the month ends).
    const spent = granted === 0 && this.wantedInCall > 0
    this.waitUntil = spent ? Math.max(now + waitMs, this.nextCallAt) : waitMs > 0 ? now + waitMs : 0
  }

  /**
   * An answer that could not cover what was asked (`short`), or (a rate) left the bucket below
   * the batch its wait counts to, says the limit is reached; one that could clears it only
   * REACHED_FOR_MS after the last that could not. An answer in the grace says nothing of the limit.
   */
  private noteReached(now: number, answer: Grant, short: boolean): void {
    if (answer.inGrace) return
    if (short || answer.waitMs > 0) {
      this.reached = true
      this.reachedAt = now
    } else if (now - this.reachedAt >= REACHED_FOR_MS) this.reached = false
  }
}
