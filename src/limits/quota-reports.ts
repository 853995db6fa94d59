// A monthly quota's lease calls (quota-month.ts): each names its report, which Redis applies once,
// so that a call whose answer did not come is sent again as it was; and a month Redis has lost is
// rebuilt from Postgres, with what this replica admitted that Postgres may not hold yet.
import type { QuotaAnswer } from './lease-store.js'
import type { LeaseCall, LimitContext } from './lease-terms.js'
import { PROBE_EVERY_MS } from './lease-terms.js'
import { monthBounds } from './month.js'
import { QuotaMonth } from './quota-month.js'
import type { Level, LoadMonthUse, PolicyName } from './types.js'

/** A month's key outlives the month by a day, so that no grant of the month can find it gone. */
const KEY_KEPT_AFTER_MONTH_MS = 86_400_000

/** A quota's lease call: named, and carrying what a month rebuilt since the last answer must count. */
interface QuotaLeaseCall extends LeaseCall {
  /**
   * Names this call's report among this replica's: the script applies one report once, so that a
   * call sent again after its answer failed to come is not counted twice (scripts.ts).
   */
  report: string
  /**
   * The units this replica admitted in the month that Postgres may not hold (UnwrittenUnits), as
   * they were when the call was made: what a copy of the month rebuilt since the last answer
   * counts beside `keep`, instead of `extra` and `debt` (which it holds, with the units spent).
   */
  unwritten: number
}

/** Report names, unique in this process (the store adds the replica's own name). */
let reports = 0

export abstract class QuotaReports extends QuotaMonth {
  /**
   * The call sent whose answer has not come: Redis may have run it, may run it still (a paused or
   * hung server runs what was written to it), or never got it. Until an answer says its fate, it
   * is the only call sent, as it was: what was admitted meanwhile waits for the next one, so that
   * no unit is in two reports.
   */
  private unsettled: { call: QuotaLeaseCall; generation: number } | null = null
  private readonly keyOf: (month: string) => string
  constructor(
    name: PolicyName,
    ctx: LimitContext,
    now: number,
    requests: number,
    subject: { tenantId: string; level: Level; meter?: string },
    keyOf: (month: string) => string,
    loadMonthUse: LoadMonthUse,
  ) {
    super(name, ctx, now, requests, subject, loadMonthUse)
    this.keyOf = keyOf
  }

  override holdsState(now: number): boolean {
    return super.holdsState(now) || this.unsettled !== null
  }

  /** The script applies a report once (scripts.ts): an unanswered call goes again as it was. */
  protected override unanswered(): LeaseCall | null {
    // Another month's call is that month's own: never sent to this month's key.
    if (this.unsettled !== null && this.unsettled.generation !== this.generation) this.unsettled = null
    return this.unsettled?.call ?? null
  }

  protected override failedCall(): void {}

  protected override prepared(call: LeaseCall): QuotaLeaseCall {
    return { ...call, report: String(++reports), unwritten: this.unwritten.total() }
  }

  protected async call(now: number, lease: LeaseCall): Promise<void> {
    const { returned, wanted, extra, debt, report } = lease as QuotaLeaseCall
    let { keep, unwritten } = lease as QuotaLeaseCall
    this.unsettled = { call: lease as QuotaLeaseCall, generation: this.generation }
    const store = this.ctx.store!
    const month = this.month
    let init = -1
    // What Postgres may not have held when this call's read was made: a copy made from it counts that.
    let sinceRead = 0
    for (;;) {
      // Whatever this replica's meter counted before this instant is in Postgres already, so in
      // any copy of the month Redis rebuilds after running this call (docs/internals.md).
      const written = this.ctx.now() - this.ctx.unwrittenForMs()
      const answer = await store.quota({
        key: this.keyOf(month),
        requests: this.requests,
        epoch: this.epoch,
        keep,
        returned,
        wanted,
        // A metered quota's debt counts as used, over M too: nothing more is granted until the month ends.
        extra: extra + debt,
        unwritten,
        unwrittenSinceRead: sinceRead,
        init,
        report,
        expireAt: monthBounds(now).end + KEY_KEPT_AFTER_MONTH_MS,
      })
      if (month !== this.month) return
      if (!answer.rebuild) {
        // Redis ran the call (now, or before: a report it had applied answers as it did then).
        this.unsettled = null
        this.unwritten.forgetBefore(written)
        this.answered(now, answer, answer.epoch === this.epoch)
        return
      }
      // Redis has no count for the month: Postgres is its source of truth. A failure there is
      // not Redis's: the call is tried again later, and Redis is not marked down.
      try {
        const read = await this.readMonth(month)
        if (month !== this.month) return
        init = read.used
        // The copy is made, or met, from what this replica holds now: the lease it still has (none
        // when on its own), and every unit it admitted that Postgres may not hold, what it owed
        // alone included (sent too, that would count twice what the read holds). What is admitted
        // from now on goes with the next call.
        keep = this.held(this.ctx.now())
        // A lease that ran out meanwhile is not in the copy made now: neither spent again (the
        // grant's answer would give it a new life) nor given back to a copy that never counted it.
        if (keep === 0) this.lease = 0
        unwritten = this.unwritten.total()
        this.unreported = 0
        this.debt = 0
        // Units to give back were counted by the copy that is gone: the new one never counted them.
        this.refunds = 0
        sinceRead = Math.min(unwritten, this.unwritten.since(read.writtenBefore))
      } catch {
        this.nextCallAt = this.ctx.now() + PROBE_EVERY_MS
        return
      }
    }
  }

  /**
   * Applies an answer. Back from local mode to the copy of the month its lease came from, the
   * lease it held when it went local and did not spend is given back with the next call: that
   * copy counted it as used when it granted it (a stall of Redis longer than a call's deadline).
   */
  private answered(now: number, answer: Extract<QuotaAnswer, { rebuild: false }>, sameCopy: boolean): void {
    const unspent = this.mode === 'local' ? this.prepaid : 0
    this.epoch = answer.epoch
    this.lastKnownUsed = answer.used
    this.granted(now, this.ctx.now(), answer, this.ctx.store!.ttlMs)
    if (this.mode === 'shared' && sameCopy && unspent > 0) this.refunds += unspent
  }
}
