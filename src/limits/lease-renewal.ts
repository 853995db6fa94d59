// How one replica renews a limit's lease (lease-holding.ts) in the background: when to call Redis,
// what the call carries (what is kept, given back, wanted, admitted alone, owed), what a failed
// call leaves, and how an answer's grant is applied (docs/internals.md, limits). Never waits.
import { LeaseDemand } from './lease-demand.js'
import { LeaseHolding } from './lease-holding.js'
import {
  type Grant,
  IDLE_SHRINK_MS,
  type LeaseCall,
  type LimitContext,
  MIN_RETRY_MS,
  PROBE_EVERY_MS,
  REACHED_FOR_MS,
} from './lease-terms.js'
import type { PolicyName } from './types.js'

/**
 * The limit's terms (lease-holding.ts, `changed`) when each call was first sent. A call sent again
 * as it was (a quota's unanswered report: quota-reports.ts) is one Redis may have run then, under
 * those terms: its answer is judged by them, not by the terms of the resending. Keyed by the call
 * object, which a resend reuses; an entry goes with its call.
 */
const termsAtFirstSend = new WeakMap<LeaseCall, number>()

export abstract class LeaseRenewal extends LeaseHolding {
  inflight = false
  /** The call (or Postgres read) under way, for `settled()`. */
  protected pending: Promise<unknown> | null = null
  /** Requests waiting for units since the last call was sent: the next lease covers them all. */
  protected asks = 0
  /** What the call under way asked for: an answer granting none of it says the limit is spent. */
  private wantedInCall = 0
  /** The limit's terms when the call under way was sent (lease-holding.ts, `changed`). */
  private termsInCall = 0
  protected readonly demand: LeaseDemand
  constructor(name: PolicyName, ctx: LimitContext, now: number, meter = 'requests') {
    super(name, ctx, now, meter)
    this.demand = new LeaseDemand(now)
  }

  /** Sends one lease call and applies its answer; rejects when Redis failed (not when Postgres did). */
  protected abstract call(now: number, lease: LeaseCall): Promise<void>

  /** Whether an answer is under way: a lease call (or, for a quota, its month read from Postgres). */
  awaitingAnswer(): boolean {
    return this.inflight
  }

  /** Resolves once the call under way, if any, is over (never rejects). */
  async settled(): Promise<void> {
    await this.pending?.catch(() => {})
  }

  /** The largest lease, at least the largest request seen (a cost above the cap would never pass). */
  protected leaseCap(): number {
    return this.demand.cap(this.cap())
  }

  /** The lease size this replica's recent demand calls for, between 1 and the cap. */
  target(now: number): number {
    return this.demand.target(now, this.cap())
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
    this.dropLapsed(now)
    const held = this.held(now)
    const idle = now - this.lastAttemptAt >= IDLE_SHRINK_MS
    if (idle) {
      const keep = Math.min(held, 1)
      // The largest cost seen sized the lease while requests came; idle, it no longer does.
      this.demand.largestAsk = 1
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
   * quota-reports.ts); null: none, or the limit's units go with the next call instead (`failedCall`).
   */
  protected unanswered(): LeaseCall | null {
    return null
  }

  /**
   * A call failed (Redis did not answer in time): its units are added to the next call's. Units
   * admitted while local are counted again rather than lost: under, never over (a rate's bucket
   * refills what a second report took). A quota sends the call again instead (quota-reports.ts).
   */
  protected failedCall(call: LeaseCall): void {
    this.unreported += call.extra
    this.debt += call.debt
  }

  /** A new call, as the subclass sends it (a quota names its report: quota-reports.ts). */
  protected prepared(call: LeaseCall): LeaseCall {
    return call
  }

  /**
   * Gives back the whole lease (closing, or forgetting an idle limit), with what is owed and what
   * waits to go back: a cold limit holds no lease but may hold refunds (a lease given back at a
   * change of terms, a grant made under older ones) or a debt, which a quota's month would count
   * as used until it ends. A local one's go with its next call once Redis answers: a stop does not
   * wait for a Redis that failed.
   */
  async release(now: number): Promise<void> {
    if (this.ctx.store === null || this.mode === 'local' || this.inflight || this.unanswered() !== null) return
    this.dropLapsed(now)
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
    const prepared = this.prepared(call)
    termsAtFirstSend.set(prepared, this.terms)
    return this.dispatch(now, prepared)
  }

  /** Sends `call` (a new one, or one unanswered sent again) and applies its answer or failure. */
  private dispatch(now: number, call: LeaseCall): Promise<void> {
    this.inflight = true
    const generation = this.generation
    this.wantedInCall = call.wanted
    this.termsInCall = termsAtFirstSend.get(call) ?? this.terms
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
    if (this.termsInCall !== this.terms) {
      // Granted under a limit that has changed since the call was sent (a credit's grant expired
      // meanwhile, a lowered N or M): spent, it would pass requests the limit now refuses. It goes
      // back with the next call, sent at once under the limit as it is.
      this.refunds += granted
      this.nextCallAt = 0
      return
    }
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
