// The limiter the proxy asks before forwarding (docs/internals.md, limits): every limit that
// applies to a request, decided from memory, with leases from Redis renewed in the background.
import type { RedisClient } from '../cache/redis-topology.js'
import { limitKeys } from './keys.js'
import { DEFAULT_LEASE_TIMINGS, type LeaseStore, type LeaseTimings, RedisLeaseStore } from './lease-store.js'
import { FORGET_AFTER_MS, type LeasedLimit, type LimitContext } from './leased-limit.js'
import { QuotaLimit } from './quota-limit.js'
import { CreditLimit, type LoadCreditUse } from './credit-limit.js'
import { RateLimit } from './rate-limit.js'
import type {
  CreditBalance,
  Decision,
  Level,
  LimiterMetrics,
  Limits,
  LimitSubject,
  LoadMonthUse,
  PolicyName,
  PolicyState,
  QuotaUse,
  Rate,
  ReportedUnits,
} from './types.js'

export interface LimiterOptions {
  /** null: embedded mode, every limit enforced in this process. */
  redis: RedisClient | null
  keyPrefix: string
  /** Forwarded requests of a UTC month, from Postgres (for an account: with its sub-accounts'). */
  loadMonthUse: LoadMonthUse
  /** The units burned from a sub-account's grants of a meter, and its debt, from Postgres (credits). */
  loadCreditUse?: LoadCreditUse
  /**
   * How long ago (ms) the oldest count the usage meter has not written to Postgres was made (the
   * meter's lag; 0: all written): a month rebuilt from Postgres misses what was counted since, and
   * each replica counts it again (docs/internals.md). Unset: 0, as when `loadMonthUse` is exact.
   */
  unwrittenForMs?: () => number
  /** Has the usage meter write what it counted, before a month is read (unset: nothing to write). */
  writeUsage?: () => Promise<void>
  now?: () => number
  metrics?: LimiterMetrics
  /** Another lease store than Redis's (tests); takes precedence over `redis`. */
  store?: LeaseStore
  timings?: Partial<LeaseTimings>
  /** How often idle leases are shrunk, renewed or given back; 0: never on a timer (tests call sweep). */
  sweepEveryMs?: number
  /** How long a request waits at most for its limits' leases (300 ms; tests on a fake clock, longer). */
  warmWaitMs?: number
}

/** What a request asks of a limit: its cost, or of a route meter's, one unit held (a balance above zero). */
const asked = (limit: LeasedLimit, units: number) => (limit.chargedAfter ? 1 : units)

/** `list` with `item` pushed, made on the first: most decisions need none. */
function pushed<T>(list: T[] | undefined, item: T): T[] {
  if (list === undefined) return [item]
  list.push(item)
  return list
}

/** How long `warm` waits at most for the first answers, unless told otherwise (warmWaitMs). */
const WARM_WAIT_MS = 300

/**
 * Resolves once the calls these limits were just asked for are answered. When none could be sent
 * (each is within an empty answer's retry time, which may end after its wait), it resolves when
 * the first may be: awaiting the settled calls instead would loop without ever yielding.
 */
function answered(limits: readonly LeasedLimit[], now: number): Promise<unknown> {
  if (limits.some((limit) => limit.awaitingAnswer())) return Promise.all(limits.map((limit) => limit.settled()))
  const next = Math.min(...limits.map((limit) => limit.nextCallAt))
  return new Promise((resolve) => setTimeout(resolve, Math.max(1, next - now)).unref())
}

/** A credit as one replica knows it: its sub-account, meter, threshold and balance (≤ 0: spent). */
export interface CreditUse {
  tenantId: string
  meter: string
  lowThresholdPercent: number
  /** What this replica believes is left, its lease included: never more than one lease above the truth. */
  remaining: number
  /** The units of the live grants. */
  granted: number
}

export class Limiter {
  private readonly limits = new Map<string, LeasedLimit>()
  /** What `applicable` found for a subjects array, while no limit has been forgotten since. */
  private readonly resolved = new WeakMap<readonly LimitSubject[], { generation: number; limits: LeasedLimit[] }>()
  /** Moves whenever a limit leaves `limits`: every `resolved` entry is then looked up again. */
  private generation = 0
  private readonly now: () => number
  private readonly ctx: LimitContext
  private readonly keyPrefix: string
  private readonly loadMonthUse: LoadMonthUse
  private readonly loadCreditUse: LoadCreditUse
  private readonly metrics: LimiterMetrics
  private readonly timer: NodeJS.Timeout | null
  /** How long `warm` waits at most for the first answers. */
  private readonly warmWaitMs: number
  private down = false
  private closed = false

  constructor(options: LimiterOptions) {
    this.now = options.now ?? Date.now
    this.keyPrefix = options.keyPrefix
    this.loadMonthUse = options.loadMonthUse
    this.loadCreditUse = options.loadCreditUse ?? (async () => 0)
    this.metrics = options.metrics ?? {}
    const timings = { ...DEFAULT_LEASE_TIMINGS, ...options.timings }
    this.warmWaitMs = options.warmWaitMs ?? WARM_WAIT_MS
    const store =
      options.store ?? (options.redis === null ? null : new RedisLeaseStore(options.redis, options.keyPrefix, timings))
    this.ctx = {
      store,
      now: this.now,
      unwrittenForMs: options.unwrittenForMs ?? (() => 0),
      writeUsage: options.writeUsage ?? (async () => {}),
      redisDown: () => this.down,
      failed: () => this.setDown(true),
      answered: () => this.setDown(false),
      metrics: this.metrics,
    }
    const every = options.sweepEveryMs ?? 250
    this.timer = every > 0 ? setInterval(() => this.sweep(), every).unref() : null
  }

  /** Whether Redis is unusable and each replica enforces on its own (tgw_limits_degraded). */
  get degraded(): boolean {
    return this.down
  }

  private setDown(down: boolean): void {
    if (this.down === down) return
    this.down = down
    this.metrics.degraded?.(down)
  }

  /**
   * The limits that apply, in the order of the policies: sub-account first, rate before quota,
   * the request units' before the meters' (in name order), a subject's shadow limits after its own.
   */
  private applicable(subjects: readonly LimitSubject[], now: number): LeasedLimit[] {
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
    const name = Limiter.entry(subject, meter, 'rate', shadow)
    let limit = this.limits.get(name) as RateLimit | undefined
    if (limit === undefined) {
      const key = limitKeys.rate(this.keyPrefix, `${subject.level}:${subject.tenantId}`, meter, shadow)
      const policy = Limiter.policy(subject.level, meter, 'rate', shadow)
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
    const name = Limiter.entry(subject, meter, 'quota', shadow)
    let limit = this.limits.get(name) as QuotaLimit | undefined
    if (limit === undefined) {
      const base = `${subject.level}:${subject.tenantId}`
      const keyOf = (month: string) => limitKeys.quota(this.keyPrefix, base, month, meter, shadow)
      const who = { tenantId: subject.tenantId, level: subject.level, meter }
      const policy = Limiter.policy(subject.level, meter, 'monthly_quota', shadow)
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

  /**
   * Synchronous, from memory: takes `units` (the request's cost) from every applicable limit only
   * if all of them allow it. A route meter's limit takes nothing now: it lets the request pass
   * while its balance is above zero, and is charged when the answer ends (`charge`).
   * `forAnswer` false decides alone, for a replay, which sends no answer: no RateLimit fields
   * (`policies` empty), no Retry-After (0).
   */
  admit(subjects: readonly LimitSubject[], units = 1, forAnswer = true): Decision {
    const now = this.now()
    const limits = this.applicable(subjects, now)
    let refusing: LeasedLimit[] | undefined
    for (const limit of limits)
      if (!limit.shadow && !limit.allows(now, asked(limit, units))) refusing = pushed(refusing, limit)
    // A shadow limit decides as an enforced one would, for an admitted request only, and refuses
    // nothing: what it would refuse takes nothing of it, as a refusal takes nothing.
    let wouldRefuse: PolicyName[] | undefined
    let untaken: PolicyName[] | undefined
    if (refusing === undefined)
      for (const limit of limits) {
        if (limit.shadow && !limit.allows(now, asked(limit, units))) {
          untaken = pushed(untaken, limit.name)
          // One not decided yet (no first answer) would refuse nothing: it is not counted so.
          if (limit.mode !== 'cold') wouldRefuse = pushed(wouldRefuse, limit.name)
          continue
        }
        if (!limit.chargedAfter) limit.take(now, units)
      }
    if (!this.closed) for (const limit of limits) limit.maintain(now)
    // The RateLimit fields are the enforced limits': a shadow limit sends none.
    // Credits are no RateLimit field either: a balance of grants has no window.
    const policies: PolicyState[] = []
    if (forAnswer)
      for (const limit of limits) if (!limit.shadow && !(limit instanceof CreditLimit)) policies.push(limit.state(now))
    if (refusing === undefined) {
      const admitted: Decision = { allowed: true, violated: [], retryAfterSeconds: 0, policies }
      if (wouldRefuse !== undefined) admitted.wouldRefuse = wouldRefuse
      if (untaken !== undefined) admitted.untaken = untaken
      return admitted
    }
    let retryAfterMs = 0
    if (forAnswer)
      for (const limit of refusing) retryAfterMs = Math.max(retryAfterMs, limit.retryAfterMs(now, asked(limit, units)))
    return {
      allowed: false,
      violated: refusing.map((limit) => limit.name),
      retryAfterSeconds: forAnswer ? Math.max(1, Math.ceil(retryAfterMs / 1000)) : 0,
      policies,
    }
  }

  /**
   * An admitted request's answer ended, and its upstream reported these units by meter: charged
   * to the limits of those meters (below zero if need be: docs/internals.md, limits in units).
   */
  charge(subjects: readonly LimitSubject[], reported: ReportedUnits): void {
    const now = this.now()
    for (const subject of subjects) {
      for (const shadow of [false, true]) {
        const meters = shadow ? subject.limits.shadow?.meters : subject.limits.meters
        for (const meter of meters ?? []) {
          const units = reported.get(meter.meter)
          if (units === undefined || units <= 0) continue
          // The limits as they are now: the subject's are as its request found them, and a change
          // since (read by a later request) must not be undone by an answer that ended after it.
          const rate =
            this.limits.get(Limiter.entry(subject, meter.meter, 'rate', shadow)) ??
            (meter.rate && this.rateLimit(subject, meter.meter, meter.rate, now, shadow))
          const quota =
            this.limits.get(Limiter.entry(subject, meter.meter, 'quota', shadow)) ??
            (meter.monthlyQuota && this.quotaLimit(subject, meter.meter, meter.monthlyQuota, now, shadow))
          for (const limit of [rate, quota]) {
            if (limit === null || limit === undefined) continue
            limit.charge(now, units)
            if (!this.closed) limit.maintain(now)
          }
        }
      }
      for (const credit of subject.limits.credits ?? []) {
        const units = reported.get(credit.meter)
        if (units === undefined || units <= 0) continue
        const limit =
          this.limits.get(`${subject.level}:${subject.tenantId}:c:${credit.meter}`) ??
          this.creditLimit(subject, credit, now)
        limit.charge(now, units)
        if (!this.closed) limit.maintain(now)
      }
    }
  }

  /**
   * The credits this replica holds, with their balance as it last knew it (approximate across
   * replicas: a hint that an alert may be due, which Postgres then decides: alerts/credit-alerts.ts).
   */
  creditUses(): CreditUse[] {
    const now = this.now()
    const uses: CreditUse[] = []
    for (const limit of this.limits.values()) {
      if (!(limit instanceof CreditLimit)) continue
      uses.push({
        ...limit.credit(),
        lowThresholdPercent: limit.balance.lowThresholdPercent,
        remaining: limit.left(now),
      })
    }
    return uses
  }

  /** An admitted request that was not forwarded after all (refused later by the gateway): give its units back. */
  refund(subjects: readonly LimitSubject[], units = 1, untaken: readonly PolicyName[] = []): void {
    const now = this.now()
    for (const limit of this.applicable(subjects, now))
      if (!limit.chargedAfter && !untaken.includes(limit.name)) limit.giveBack(now, units)
  }

  /** Whether Redis, found empty a moment ago, grants nothing yet to a limit of these subjects. */
  inGrace(subjects: readonly LimitSubject[]): boolean {
    const now = this.now()
    return this.applicable(subjects, now).some((limit) => limit.mode === 'shared' && now < limit.graceUntil)
  }

  /**
   * Whether every limit of these subjects can decide from memory: it has had its first answer (a
   * lease, or a local state) and is not starved (its lease spent by a burst while the shared state
   * had more). A limit that is reached always decides from memory (leased-limit.ts, starved).
   */
  isWarm(subjects: readonly LimitSubject[], units = 1): boolean {
    const now = this.now()
    return this.applicable(subjects, now).every((limit) => limit.ready(now, asked(limit, units)))
  }

  /**
   * Starts the first lease of every limit of these subjects not known yet (or the renewal of a
   * starved one), and resolves when they have answered or after `maxWaitMs` (never rejects),
   * saying whether it gave up waiting. The
   * proxy awaits it only for such a limit: a new tenant's first request, or the second of a burst
   * after an idle second, waits one round trip instead of being refused.
   */
  async warm(
    subjects: readonly LimitSubject[],
    maxWaitMs = this.warmWaitMs,
    units = 1,
  ): Promise<{ timedOut: boolean }> {
    const deadline = this.now() + maxWaitMs
    let timer: NodeJS.Timeout | undefined
    let timedOut = false
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        timedOut = true
        resolve()
      }, maxWaitMs)
    })
    try {
      // A quota whose month Redis lost answers after a Postgres read and a second call: rounds.
      for (let round = 0; round < 3 && this.now() < deadline; round++) {
        const now = this.now()
        const cold = this.applicable(subjects, now).filter((limit) => !limit.ready(now, asked(limit, units)))
        if (cold.length === 0) break
        for (const limit of cold) limit.ask(this.now(), asked(limit, units))
        await Promise.race([answered(cold, now), late])
      }
    } finally {
      clearTimeout(timer)
    }
    return { timedOut: timedOut || this.now() >= deadline }
  }

  /**
   * `admit` for a request whose limits are not all warm (isWarm): waits for their leases, then
   * decides; refused while a refusing limit is still starved (a burst larger than the renewal),
   * asks again, within `maxWaitMs` in all.
   */
  async admitWhenWarm(subjects: readonly LimitSubject[], maxWaitMs = this.warmWaitMs, units = 1): Promise<Decision> {
    const waitFrom = this.now()
    const deadline = waitFrom + maxWaitMs
    for (;;) {
      // Timed out by its own timer too: a timer may fire a little before Date.now() reaches its
      // end (libuv counts from the loop's start), which must not make a cold limit a 429.
      const { timedOut } = await this.warm(subjects, Math.max(1, deadline - this.now()), units)
      const decision = this.admit(subjects, units)
      const now = this.now()
      const late = timedOut || now >= deadline
      if (!decision.allowed && late && this.noneKnownReached(subjects, decision, waitFrom, now, units))
        return { ...decision, undecided: true }
      if (decision.allowed || late || this.closed) return decision
      // Refused by a limit not known to be reached (not read yet, or starved): waits on, as long
      // as the wait lasts. A cold limit's answer may come after warm's rounds (a call that failed
      // while its month was read from Postgres), and is never a 429 before it.
      const unknown = this.applicable(subjects, now).some(
        (limit) =>
          decision.violated.includes(limit.name) && (limit.mode === 'cold' || limit.starved(now, asked(limit, units))),
      )
      if (!unknown) return decision
    }
  }

  /**
   * Whether no limit that refused is known to be reached: each was not read yet (cold), or is
   * starved (its lease emptied) with no answer from Redis since the wait began. Refused out of
   * time so, a request is a 503 to retry. One that a reached limit refused is a 429 all the same,
   * and so is one a starved limit refused while Redis answered: the units it granted meanwhile
   * went to the requests ahead, so the limit is spent for now, not unknown.
   */
  private noneKnownReached(
    subjects: readonly LimitSubject[],
    decision: Decision,
    waitFrom: number,
    now: number,
    units: number,
  ): boolean {
    const limits = this.applicable(subjects, now)
    return (
      decision.violated.length > 0 &&
      decision.violated.every((name) =>
        limits.some(
          (limit) =>
            limit.name === name &&
            !limit.shadow &&
            (limit.mode === 'cold' || (limit.starved(now, asked(limit, units)) && limit.answeredAt < waitFrom)),
        ),
      )
    )
  }

  /** Every monthly quota this replica holds (used in the last 10 s), with its use as last known. */
  quotaUses(): QuotaUse[] {
    const uses: QuotaUse[] = []
    for (const limit of this.limits.values()) {
      const use = limit instanceof QuotaLimit ? limit.use() : null
      if (use !== null) uses.push(use)
    }
    return uses
  }

  /** Shrinks, renews and gives back idle leases; forgets limits unused for a while. */
  sweep(): void {
    const now = this.now()
    for (const [name, limit] of this.limits) {
      if (now - limit.lastAttemptAt >= FORGET_AFTER_MS && !limit.inflight && !limit.holdsState(now)) {
        this.limits.delete(name)
        this.generation++
        limit.release(now).catch(() => {})
      } else if (!this.closed) limit.maintain(now)
    }
  }

  /** Gives unused leases back to Redis. */
  async close(): Promise<void> {
    this.closed = true
    if (this.timer !== null) clearInterval(this.timer)
    const limits = [...this.limits.values()]
    this.limits.clear()
    this.generation++
    await Promise.all(
      limits.map(async (limit) => {
        await limit.settled()
        await limit.release(this.now()).catch(() => {})
      }),
    )
  }
}
