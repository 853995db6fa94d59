// A monthly quota as one replica holds it (leased-limit.ts): units are requests of the current
// UTC month; Redis counts every unit granted, and rebuilds a lost month from Postgres. The local
// state is a count of the month's use, seeded from Redis or, failing that, from Postgres.
import { type LeaseCall, type LimitContext, LeasedLimit, PROBE_EVERY_MS } from './leased-limit.js'
import { monthBounds, monthOf, monthSeconds, secondsToNextMonth } from './month.js'
import type { QuotaAnswer } from './lease-store.js'
import type { Level, LoadMonthUse, PolicyName, PolicyState, QuotaUse } from './types.js'
import { UnwrittenUnits } from './unwritten-units.js'

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

export class QuotaLimit extends LeasedLimit {
  /**
   * The call sent whose answer has not come: Redis may have run it, may run it still (a paused or
   * hung server runs what was written to it), or never got it. Until an answer says its fate, it
   * is the only call sent, as it was: what was admitted meanwhile waits for the next one, so that
   * no unit is in two reports.
   */
  private unsettled: { call: QuotaLeaseCall; generation: number } | null = null
  /** This month's units admitted here that Postgres may not hold yet. */
  private readonly unwritten = new UnwrittenUnits()
  private month: string
  /** The month's bounds (ms): a request within them needs no date arithmetic to know its month. */
  private monthStart: number
  private monthEnd: number
  /** The month's use as Redis last counted it (this replica's lease included), or null. */
  private lastKnownUsed: number | null = null
  /** The key's epoch the lease was granted in (lease-store.ts). */
  private epoch = ''
  private localUsed = 0
  /** The month's use being read from Postgres, beside any lease call (awaited by `settled`). */
  private monthRead: Promise<void> | null = null

  public requests: number
  private readonly subject: { tenantId: string; level: Level; meter: string }
  private readonly keyOf: (month: string) => string
  private readonly loadMonthUse: LoadMonthUse
  constructor(
    name: PolicyName,
    ctx: LimitContext,
    now: number,
    requests: number,
    subject: { tenantId: string; level: Level; meter?: string },
    keyOf: (month: string) => string,
    loadMonthUse: LoadMonthUse,
  ) {
    const meter = subject.meter ?? 'requests'
    super(name, ctx, now, meter)
    this.requests = requests
    this.subject = { tenantId: subject.tenantId, level: subject.level, meter }
    this.keyOf = keyOf
    this.loadMonthUse = loadMonthUse
    this.month = monthOf(now)
    const bounds = monthBounds(now)
    this.monthStart = bounds.start
    this.monthEnd = bounds.end
    if (ctx.store === null) this.load(now)
  }

  protected cap(): number {
    return Math.max(1, Math.ceil(this.requests / 100))
  }

  protected capacity(): number {
    return this.requests
  }

  /** A new month: nothing of the last one's lease or count may be spent in it. */
  protected override sync(now: number): void {
    // Within the month's bounds (nearly always) no date is made: this runs for every request.
    if (now < this.monthStart || now >= this.monthEnd) this.enterMonth(now)
    super.sync(now)
  }

  private enterMonth(now: number): void {
    const bounds = monthBounds(now)
    this.monthStart = bounds.start
    this.monthEnd = bounds.end
    // Out of the bounds is another month (a clock set back included).
    this.month = monthOf(now)
    this.lease = 0
    this.leaseExpiresAt = 0
    this.lastKnownUsed = null
    this.epoch = ''
    this.refunds = 0
    this.prepaid = 0
    this.unreported = 0
    // What was spent or owed in the last month is its own: never sent to this month's key.
    this.spentSinceSend = 0
    this.debt = 0
    this.unwritten.clear()
    this.generation++
    this.nextCallAt = 0
    this.mode = 'cold'
    this.reached = false
    if (this.ctx.store === null || this.ctx.redisDown()) this.load(now)
  }

  /** Reads the month's use from Postgres into the local state (embedded, or Redis down and cold). */
  private load(now: number): void {
    if (this.monthRead !== null) return
    const month = this.month
    this.monthRead = this.readMonth(month).then(
      ({ used }) => {
        this.monthRead = null
        if (month !== this.month || this.mode !== 'cold') return
        this.lastKnownUsed = used
        this.goLocal(now)
      },
      () => {
        this.monthRead = null
        // Read again in a while (maintain), as a failed lease call is sent again.
        this.nextCallAt = Math.max(this.nextCallAt, this.ctx.now() + PROBE_EVERY_MS)
      },
    )
  }

  /** Embedded, no lease call reads the month: a month not read yet is read (again) here. */
  override maintain(now: number): void {
    if (this.ctx.store === null && this.mode === 'cold' && now >= this.nextCallAt) this.load(now)
    super.maintain(now)
  }

  override awaitingAnswer(): boolean {
    return this.inflight || this.monthRead !== null
  }

  /** Both may be under way: a lease call, and the month read from Postgres (Redis taken for down). */
  override async settled(): Promise<void> {
    await Promise.all([super.settled(), this.monthRead])
  }

  override take(now: number, units = 1): void {
    super.take(now, units)
    this.unwritten.add(now, units)
  }

  override charge(now: number, units: number): void {
    super.charge(now, units)
    this.unwritten.add(now, units)
  }

  override giveBack(now: number, units = 1): void {
    super.giveBack(now, units)
    this.unwritten.remove(units)
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
        unwritten = this.unwritten.total()
        this.unreported = 0
        this.debt = 0
        sinceRead = Math.min(unwritten, this.unwritten.since(read.writtenBefore))
      } catch {
        this.nextCallAt = this.ctx.now() + PROBE_EVERY_MS
        return
      }
    }
  }

  /**
   * The month's use from Postgres, once this replica's meter wrote what it counted; and the local
   * time (ms) before which whatever the meter counted is in that read.
   */
  private async readMonth(month: string): Promise<{ used: number; writtenBefore: number }> {
    await this.ctx.writeUsage()
    const writtenBefore = this.ctx.now() - this.ctx.unwrittenForMs()
    return { used: await this.loadMonthUse(this.subject, month), writtenBefore }
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

  protected enterLocal(now: number): boolean {
    if (this.lastKnownUsed === null) {
      this.load(now)
      return false
    }
    // Redis counted this replica's lease as used; what is left of it is this replica's to spend.
    this.localUsed = Math.max(0, this.lastKnownUsed - this.held(now))
    return true
  }

  protected localAllows(_now: number, units: number): boolean {
    return this.localUsed + units <= this.requests
  }

  protected localTake(_now: number, units: number): void {
    this.localUsed += units
  }

  protected localGiveBack(_now: number, units: number): void {
    this.localUsed = Math.max(0, this.localUsed - units)
  }

  protected localCharge(_now: number, units: number): void {
    this.localUsed += units
  }

  private remaining(now: number): number {
    if (this.mode === 'local') return Math.max(0, this.requests - this.localUsed)
    if (this.lastKnownUsed === null) return 0
    return Math.max(0, Math.min(this.requests, this.requests - this.lastKnownUsed + this.held(now)))
  }

  /** Whether the month has not `units` left as far as this replica knows (then Retry-After is the next month). */
  private exhausted(now: number, units: number): boolean {
    return this.lastKnownUsed !== null && this.remaining(now) < units
  }

  /** Its own shares for usage.threshold_reached (%); null: the defaults. Set by the limiter. */
  alertThresholds: readonly number[] | null = null

  /**
   * The month's use as this replica last knew it, its unspent lease included (so never below what
   * was forwarded, give or take a second's flush): the alerts' hint that a threshold may be
   * crossed (alerts/quota-alerts.ts). null before the first answer.
   */
  use(): QuotaUse | null {
    const used = this.mode === 'local' ? this.localUsed : this.lastKnownUsed
    if (used === null) return null
    const use = {
      ...this.subject,
      requests: this.requests,
      month: this.month,
      used,
      alertThresholds: this.alertThresholds,
    }
    return this.shadow ? { ...use, shadow: true } : use
  }

  state(now: number): PolicyState {
    // From the month's bounds as held (brought up to date by the decision before): no date is
    // made for the RateLimit fields of every request.
    const inMonth = now >= this.monthStart && now < this.monthEnd
    return {
      name: this.name,
      quota: this.requests,
      windowSeconds: inMonth ? (this.monthEnd - this.monthStart) / 1000 : monthSeconds(now),
      remaining: this.remaining(now),
      resetSeconds: inMonth ? Math.max(1, Math.ceil((this.monthEnd - now) / 1000)) : secondsToNextMonth(now),
    }
  }

  retryAfterMs(now: number, units: number): number {
    if (this.exhausted(now, units)) return secondsToNextMonth(now) * 1000
    return Math.max(0, this.waitUntil - now)
  }
}
