// A monthly quota's month as one replica holds it (quota-limit.ts): which UTC month its units
// count in, a new month's clean start, its use read from Postgres (embedded, or Redis down before
// any answer), and the month's units admitted here that Postgres may not hold yet.
import { LeasedLimit } from './leased-limit.js'
import { type LimitContext, PROBE_EVERY_MS } from './lease-terms.js'
import { monthBounds, monthOf } from './month.js'
import type { Level, LoadMonthUse, PolicyName } from './types.js'
import { UnwrittenUnits } from './unwritten-units.js'

export abstract class QuotaMonth extends LeasedLimit {
  /** This month's units admitted here that Postgres may not hold yet. */
  protected readonly unwritten = new UnwrittenUnits()
  protected month: string
  /** The month's bounds (ms): a request within them needs no date arithmetic to know its month. */
  protected monthStart: number
  protected monthEnd: number
  /** The month's use as Redis last counted it (this replica's lease included), or null. */
  protected lastKnownUsed: number | null = null
  /** The key's epoch the lease was granted in (lease-store.ts). */
  protected epoch = ''
  /** The month's use being read from Postgres, beside any lease call (awaited by `settled`). */
  private monthRead: Promise<void> | null = null

  public requests: number
  protected readonly subject: { tenantId: string; level: Level; meter: string }
  private readonly loadMonthUse: LoadMonthUse
  constructor(
    name: PolicyName,
    ctx: LimitContext,
    now: number,
    requests: number,
    subject: { tenantId: string; level: Level; meter?: string },
    loadMonthUse: LoadMonthUse,
  ) {
    const meter = subject.meter ?? 'requests'
    super(name, ctx, now, meter)
    this.requests = requests
    this.subject = { tenantId: subject.tenantId, level: subject.level, meter }
    this.loadMonthUse = loadMonthUse
    this.month = monthOf(now)
    const bounds = monthBounds(now)
    this.monthStart = bounds.start
    this.monthEnd = bounds.end
    if (ctx.store === null) this.load(now)
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
  protected load(now: number): void {
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

  /**
   * The month's use from Postgres, once this replica's meter wrote what it counted; and the local
   * time (ms) before which whatever the meter counted is in that read.
   */
  protected async readMonth(month: string): Promise<{ used: number; writtenBefore: number }> {
    await this.ctx.writeUsage()
    const writtenBefore = this.ctx.now() - this.ctx.unwrittenForMs()
    return { used: await this.loadMonthUse(this.subject, month), writtenBefore }
  }
}
