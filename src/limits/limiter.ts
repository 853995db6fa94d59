// The limiter the proxy asks before forwarding (docs/internals.md, limits): every limit that
// applies to a request, decided from memory, with leases from Redis renewed in the background.
import type { RedisClient } from '../cache/redis-topology.js'
import { CreditLimit, type LoadCreditUse } from './credit-limit.js'
import { asked, type LeasedLimit } from './leased-limit.js'
import { DEFAULT_LEASE_TIMINGS, type LeaseStore, type LeaseTimings, RedisLeaseStore } from './lease-store.js'
import type { LimitContext } from './lease-terms.js'
import { LimitTable } from './limit-table.js'
import { LimitWaits } from './limit-waits.js'
import { QuotaLimit } from './quota-limit.js'
import type {
  Decision,
  LimiterMetrics,
  LimitSubject,
  LoadMonthUse,
  PolicyName,
  PolicyState,
  QuotaUse,
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

/** `list` with `item` pushed, made on the first: most decisions need none. */
function pushed<T>(list: T[] | undefined, item: T): T[] {
  if (list === undefined) return [item]
  list.push(item)
  return list
}

/** How long `warm` waits at most for the first answers, unless told otherwise (warmWaitMs). */
const WARM_WAIT_MS = 300

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
  private readonly table: LimitTable
  private readonly waits: LimitWaits
  private readonly now: () => number
  private readonly metrics: LimiterMetrics
  private readonly timer: NodeJS.Timeout | null
  /** How long `warm` waits at most for the first answers. */
  private readonly warmWaitMs: number
  private down = false
  private closed = false

  constructor(options: LimiterOptions) {
    this.now = options.now ?? Date.now
    this.metrics = options.metrics ?? {}
    const timings = { ...DEFAULT_LEASE_TIMINGS, ...options.timings }
    this.warmWaitMs = options.warmWaitMs ?? WARM_WAIT_MS
    const store =
      options.store ?? (options.redis === null ? null : new RedisLeaseStore(options.redis, options.keyPrefix, timings))
    const ctx: LimitContext = {
      store,
      now: this.now,
      unwrittenForMs: options.unwrittenForMs ?? (() => 0),
      writeUsage: options.writeUsage ?? (async () => {}),
      redisDown: () => this.down,
      failed: () => this.setDown(true),
      answered: () => this.setDown(false),
      metrics: this.metrics,
    }
    this.table = new LimitTable(ctx, options.keyPrefix, options.loadMonthUse, options.loadCreditUse ?? (async () => 0))
    this.waits = new LimitWaits({
      now: this.now,
      applicable: (subjects, now) => this.table.applicable(subjects, now),
      admit: (subjects, units) => this.admit(subjects, units),
      closed: () => this.closed,
    })
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
   * Synchronous, from memory: takes `units` (the request's cost) from every applicable limit only
   * if all of them allow it. A route meter's limit takes nothing now: it lets the request pass
   * while its balance is above zero, and is charged when the answer ends (`charge`).
   * `forAnswer` false decides alone, for a replay, which sends no answer: no RateLimit fields
   * (`policies` empty), no Retry-After (0).
   */
  admit(subjects: readonly LimitSubject[], units = 1, forAnswer = true): Decision {
    const now = this.now()
    const limits = this.table.applicable(subjects, now)
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
          for (const limit of this.table.metered(subject, meter, shadow, now)) {
            if (limit === null || limit === undefined) continue
            limit.charge(now, units)
            if (!this.closed) limit.maintain(now)
          }
        }
      }
      for (const credit of subject.limits.credits ?? []) {
        const units = reported.get(credit.meter)
        if (units === undefined || units <= 0) continue
        const limit = this.table.credited(subject, credit, now)
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
    for (const limit of this.table.values()) {
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
    for (const limit of this.table.applicable(subjects, now))
      if (!limit.chargedAfter && !untaken.includes(limit.name)) limit.giveBack(now, units)
  }

  /** Whether Redis, found empty a moment ago, grants nothing yet to a limit of these subjects. */
  inGrace(subjects: readonly LimitSubject[]): boolean {
    const now = this.now()
    return this.table.applicable(subjects, now).some((limit) => limit.mode === 'shared' && now < limit.graceUntil)
  }

  /**
   * Whether every limit of these subjects can decide from memory: it has had its first answer (a
   * lease, or a local state) and is not starved (its lease spent by a burst while the shared state
   * had more). A limit that is reached always decides from memory (leased-limit.ts, starved).
   */
  isWarm(subjects: readonly LimitSubject[], units = 1): boolean {
    const now = this.now()
    return this.table.applicable(subjects, now).every((limit) => limit.ready(now, asked(limit, units)))
  }

  /**
   * Starts the first lease of every limit of these subjects not known yet (or the renewal of a
   * starved one), and resolves when they have answered or after `maxWaitMs` (never rejects),
   * saying whether it gave up waiting. The
   * proxy awaits it only for such a limit: a new tenant's first request, or the second of a burst
   * after an idle second, waits one round trip instead of being refused.
   */
  warm(subjects: readonly LimitSubject[], maxWaitMs = this.warmWaitMs, units = 1): Promise<{ timedOut: boolean }> {
    return this.waits.warm(subjects, maxWaitMs, units)
  }

  /**
   * `admit` for a request whose limits are not all warm (isWarm): waits for their leases, then
   * decides; refused while a refusing limit is still starved (a burst larger than the renewal),
   * asks again, within `maxWaitMs` in all (limit-waits.ts).
   */
  admitWhenWarm(subjects: readonly LimitSubject[], maxWaitMs = this.warmWaitMs, units = 1): Promise<Decision> {
    return this.waits.admitWhenWarm(subjects, maxWaitMs, units)
  }

  /** Every monthly quota this replica holds (used in the last 10 s), with its use as last known. */
  quotaUses(): QuotaUse[] {
    const uses: QuotaUse[] = []
    for (const limit of this.table.values()) {
      const use = limit instanceof QuotaLimit ? limit.use() : null
      if (use !== null) uses.push(use)
    }
    return uses
  }

  /** Shrinks, renews and gives back idle leases; forgets limits unused for a while. */
  sweep(): void {
    this.table.sweep(this.now(), this.closed)
  }

  /** Gives unused leases back to Redis. */
  async close(): Promise<void> {
    this.closed = true
    if (this.timer !== null) clearInterval(this.timer)
    await Promise.all(
      this.table.clear().map(async (limit) => {
        await limit.settled()
        await limit.release(this.now()).catch(() => {})
      }),
    )
  }
}
