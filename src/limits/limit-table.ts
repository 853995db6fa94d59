// The limits one replica holds, by name (docs/internals.md, limits): made when a request first
// names them (a rate, a monthly quota, a meter's, a shadow's, a credit), changed in place when the
// tenant's limits change, forgotten after a while unused. The limiter decides over what it finds.
import { limitKeys } from './keys.js'
import { CreditLimit, type LoadCreditUse } from './credit-limit.js'
import type { LeasedLimit } from './leased-limit.js'
import { FORGET_AFTER_MS, type LimitContext } from './lease-terms.js'
import { QuotaLimit } from './quota-limit.js'
import { RateLimit } from './rate-limit.js'
import type { CreditBalance, Level, Limits, LimitSubject, LoadMonthUse, MeterLimit, PolicyName, Rate } from './types.js'

export class LimitTable {
  private readonly limits = new Map<string, LeasedLimit>()
  /** What `applicable` found for a subjects array, while no limit has been forgotten since. */
  private readonly resolved = new WeakMap<readonly LimitSubject[], { generation: number; limits: LeasedLimit[] }>()
  /** What `credited` found for a credit's balance, while no limit has been forgotten since. */
  private readonly charged = new WeakMap<CreditBalance, { generation: number; tenantId: string; limit: LeasedLimit }>()
  /** Moves whenever a limit leaves `limits`: every `resolved` and `charged` entry is then looked up again. */
  private generation = 0
  private readonly ctx: LimitContext
  private readonly keyPrefix: string
  private readonly loadMonthUse: LoadMonthUse
  private readonly loadCreditUse: LoadCreditUse
  constructor(ctx: LimitContext, keyPrefix: string, loadMonthUse: LoadMonthUse, loadCreditUse: LoadCreditUse) {
    this.ctx = ctx
    this.keyPrefix = keyPrefix
    this.loadMonthUse = loadMonthUse
    this.loadCreditUse = loadCreditUse
  }

  /** Every limit held. */
  values(): IterableIterator<LeasedLimit> {
    return this.limits.values()
  }

  /**
   * The limits that apply, in the order of the policies: sub-account first, rate before quota,
   * the request units' before the meters' (in name order), a subject's shadow limits after its own.
   */
  applicable(subjects: readonly LimitSubject[], now: number): LeasedLimit[] {
    // The same subjects (a request admitted from memory reuses its admission's) find the same
    // limits until one is forgotten: no names made, no lookups, for every request.
    const known = this.resolved.get(subjects)
    if (known !== undefined && known.generation === this.generation) return known.limits
    const found: LeasedLimit[] = []
    for (const level of ['sub_account', 'account', 'management'] as const) {
      for (const subject of subjects) {
        if (subject.level !== level) continue
        this.limitsOf(subject, subject.limits, false, now, found)
        // The management API has a rate only.
        if (level !== 'management' && subject.limits.shadow !== undefined)
          this.limitsOf(subject, subject.limits.shadow, true, now, found)
      }
    }
    this.resolved.set(subjects, { generation: this.generation, limits: found })
    return found
  }

  /**
   * A meter's rate and quota as they are now, to charge an answer's units to: the subject's are as
   * its request found them, and a change since (read by a later request) must not be undone by an
   * answer that ended after it.
   */
  metered(subject: LimitSubject, meter: MeterLimit, shadow: boolean, now: number): (LeasedLimit | null | undefined)[] {
    const rate =
      this.limits.get(LimitTable.entry(subject, meter.meter, 'rate', shadow)) ??
      (meter.rate && this.rateLimit(subject, meter.meter, meter.rate, now, shadow))
    const quota =
      this.limits.get(LimitTable.entry(subject, meter.meter, 'quota', shadow)) ??
      (meter.monthlyQuota && this.quotaLimit(subject, meter.meter, meter.monthlyQuota, now, shadow))
    return [rate, quota]
  }

  /** A sub-account's credits of a meter as held now (made if none), to charge an answer's units to. */
  credited(subject: LimitSubject, credit: CreditBalance, now: number): LeasedLimit {
    // Every answer of a credited sub-account is charged: found by its balance (the subjects of
    // an admission are reused, and so is that object) rather than by a name made anew each time.
    const known = this.charged.get(credit)
    if (known !== undefined && known.generation === this.generation && known.tenantId === subject.tenantId)
      return known.limit
    const limit =
      this.limits.get(`${subject.level}:${subject.tenantId}:c:${credit.meter}`) ??
      this.creditLimit(subject, credit, now)
    this.charged.set(credit, { generation: this.generation, tenantId: subject.tenantId, limit })
    return limit
  }

  /** Forgets limits unused for a while (their leases given back); the others maintain theirs unless `closed`. */
  sweep(now: number, closed: boolean): void {
    for (const [name, limit] of this.limits) {
      if (now - limit.lastAttemptAt >= FORGET_AFTER_MS && !limit.inflight && !limit.holdsState(now)) {
        this.limits.delete(name)
        this.generation++
        limit.release(now).catch(() => {})
      } else if (!closed) limit.maintain(now)
    }
  }

  /** Forgets every limit, and says which they were. */
  clear(): LeasedLimit[] {
    const limits = [...this.limits.values()]
    this.limits.clear()
    this.generation++
    return limits
  }

  private limitsOf(subject: LimitSubject, limits: Limits, shadow: boolean, now: number, found: LeasedLimit[]): void {
    const { rate, monthlyQuota, meters, credits } = limits
    if (rate !== null) found.push(this.rateLimit(subject, 'requests', rate, now, shadow))
    if (subject.level === 'management') return
    if (monthlyQuota !== null) found.push(this.quotaLimit(subject, 'requests', monthlyQuota, now, shadow))
    for (const meter of meters ?? []) {
      if (meter.rate !== null) found.push(this.rateLimit(subject, meter.meter, meter.rate, now, shadow))
      if (meter.monthlyQuota !== null)
        found.push(this.quotaLimit(subject, meter.meter, meter.monthlyQuota, now, shadow))
    }
    // A sub-account's credits, after its other limits (never a shadow's).
    if (!shadow && subject.level === 'sub_account')
      for (const credit of credits ?? []) found.push(this.creditLimit(subject, credit, now))
  }

  /** A sub-account's credits of a meter; a new schedule of grants replaces the one held. */
  private creditLimit(subject: LimitSubject, balance: CreditBalance, now: number): CreditLimit {
    const name = `${subject.level}:${subject.tenantId}:c:${balance.meter}`
    let limit = this.limits.get(name) as CreditLimit | undefined
    if (limit === undefined) {
      const base = `${subject.level}:${subject.tenantId}`
      const keyOf = (month: string) => limitKeys.credit(this.keyPrefix, base, balance.meter, month)
      const policy: PolicyName = `sub_account.credits.${balance.meter}`
      limit = new CreditLimit(policy, this.ctx, now, balance, subject, keyOf, this.loadCreditUse)
      this.limits.set(name, limit)
    } else limit.balance = balance
    return limit
  }

  /** The policy's name: `<level>[.shadow].rate`, or `<level>[.shadow].meters.<meter>.rate` for a route meter's. */
  private static policy(level: Level, meter: string, kind: 'rate' | 'monthly_quota', shadow: boolean): PolicyName {
    const at = shadow ? `${level}.shadow` : level
    return (meter === 'requests' ? `${at}.${kind}` : `${at}.meters.${meter}.${kind}`) as PolicyName
  }

  /** A limit's name in this replica's map: its level, tenant, kind, and meter and shadow if any. */
  private static entry(subject: LimitSubject, meter: string, kind: 'rate' | 'quota', shadow: boolean): string {
    const base = `${subject.level}:${subject.tenantId}${shadow ? ':s' : ''}`
    return meter === 'requests' ? `${base}:${kind}` : `${base}:m:${meter}:${kind}`
  }

  private rateLimit(subject: LimitSubject, meter: string, rate: Rate, now: number, shadow = false): RateLimit {
    const name = LimitTable.entry(subject, meter, 'rate', shadow)
    let limit = this.limits.get(name) as RateLimit | undefined
    if (limit === undefined) {
      const key = limitKeys.rate(this.keyPrefix, `${subject.level}:${subject.tenantId}`, meter, shadow)
      const policy = LimitTable.policy(subject.level, meter, 'rate', shadow)
      limit = new RateLimit(policy, this.ctx, now, rate, key, meter)
      limit.shadow = shadow
      this.limits.set(name, limit)
    } else if (limit.rate.requests !== rate.requests || limit.rate.perSeconds !== rate.perSeconds) {
      limit.rate = rate
      limit.changed(now)
    }
    return limit
  }

  private quotaLimit(
    subject: LimitSubject,
    meter: string,
    quota: NonNullable<Limits['monthlyQuota']>,
    now: number,
    shadow = false,
  ): QuotaLimit {
    const name = LimitTable.entry(subject, meter, 'quota', shadow)
    let limit = this.limits.get(name) as QuotaLimit | undefined
    if (limit === undefined) {
      const base = `${subject.level}:${subject.tenantId}`
      const keyOf = (month: string) => limitKeys.quota(this.keyPrefix, base, month, meter, shadow)
      const who = { tenantId: subject.tenantId, level: subject.level, meter }
      const policy = LimitTable.policy(subject.level, meter, 'monthly_quota', shadow)
      limit = new QuotaLimit(policy, this.ctx, now, quota.requests, who, keyOf, this.loadMonthUse)
      limit.shadow = shadow
      this.limits.set(name, limit)
    } else if (limit.requests !== quota.requests) {
      limit.requests = quota.requests
      limit.changed(now)
    }
    limit.alertThresholds = quota.alertThresholds ?? null
    return limit
  }
}
