// The limiter the proxy asks before forwarding (docs/internals.md, limits): every limit that
// applies to a request, decided from memory, with leases from Redis renewed in the background.
import type { RedisClient } from '../cache/redis-topology.js'
import { limitKeys } from './keys.js'
import { DEFAULT_LEASE_TIMINGS, type LeaseStore, type LeaseTimings, RedisLeaseStore } from './lease-store.js'
import { FORGET_AFTER_MS, type LeasedLimit, type LimitContext } from './leased-limit.js'
import { QuotaLimit } from './quota-limit.js'
import { RateLimit } from './rate-limit.js'
import type { Decision, LimiterMetrics, LimitSubject, LoadMonthUse, QuotaUse } from './types.js'

export interface LimiterOptions {
  /** null: embedded mode, every limit enforced in this process. */
  redis: RedisClient | null
  keyPrefix: string
  /** Forwarded requests of a UTC month, from Postgres (for an account: with its sub-accounts'). */
  loadMonthUse: LoadMonthUse
  now?: () => number
  metrics?: LimiterMetrics
  /** Another lease store than Redis's (tests); takes precedence over `redis`. */
  store?: LeaseStore
  timings?: Partial<LeaseTimings>
  /** How often idle leases are shrunk, renewed or given back; 0: never on a timer (tests call sweep). */
  sweepEveryMs?: number
}

/** How long `warm` waits at most for the first answers. */
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

export class Limiter {
  private readonly limits = new Map<string, LeasedLimit>()
  private readonly now: () => number
  private readonly ctx: LimitContext
  private readonly keyPrefix: string
  private readonly loadMonthUse: LoadMonthUse
  private readonly metrics: LimiterMetrics
  private readonly timer: NodeJS.Timeout | null
  private down = false
  private closed = false

  constructor(options: LimiterOptions) {
    this.now = options.now ?? Date.now
    this.keyPrefix = options.keyPrefix
    this.loadMonthUse = options.loadMonthUse
    this.metrics = options.metrics ?? {}
    const timings = { ...DEFAULT_LEASE_TIMINGS, ...options.timings }
    const store =
      options.store ?? (options.redis === null ? null : new RedisLeaseStore(options.redis, options.keyPrefix, timings))
    this.ctx = {
      store,
      now: this.now,
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

  /** The limits that apply, in the order of the policies: sub-account first, rate before quota. */
  private applicable(subjects: readonly LimitSubject[], now: number): LeasedLimit[] {
    const found: LeasedLimit[] = []
    for (const level of ['sub_account', 'account', 'management'] as const) {
      for (const subject of subjects) {
        if (subject.level !== level) continue
        const { rate, monthlyQuota } = subject.limits
        const base = `${level}:${subject.tenantId}`
        if (rate !== null) {
          let limit = this.limits.get(`${base}:rate`) as RateLimit | undefined
          if (limit === undefined) {
            const key = limitKeys.rate(this.keyPrefix, base)
            limit = new RateLimit(`${level}.rate`, this.ctx, now, rate, key)
            this.limits.set(`${base}:rate`, limit)
          } else if (limit.rate.requests !== rate.requests || limit.rate.perSeconds !== rate.perSeconds) {
            limit.rate = rate
            limit.changed(now)
          }
          found.push(limit)
        }
        // The management API has a rate only.
        if (monthlyQuota !== null && level !== 'management') {
          let limit = this.limits.get(`${base}:quota`) as QuotaLimit | undefined
          if (limit === undefined) {
            const keyOf = (month: string) => limitKeys.quota(this.keyPrefix, base, month)
            const who = { tenantId: subject.tenantId, level }
            limit = new QuotaLimit(
              `${level}.monthly_quota`,
              this.ctx,
              now,
              monthlyQuota.requests,
              who,
              keyOf,
              this.loadMonthUse,
            )
            this.limits.set(`${base}:quota`, limit)
          } else if (limit.requests !== monthlyQuota.requests) {
            limit.requests = monthlyQuota.requests
            limit.changed(now)
          }
          limit.alertThresholds = monthlyQuota.alertThresholds ?? null
          found.push(limit)
        }
      }
    }
    return found
  }

  /**
   * Synchronous, from memory: takes `units` (the request's cost) from every applicable limit only
   * if all of them allow it.
   */
  admit(subjects: readonly LimitSubject[], units = 1): Decision {
    const now = this.now()
    const limits = this.applicable(subjects, now)
    const refusing = limits.filter((limit) => !limit.allows(now, units))
    if (refusing.length === 0) for (const limit of limits) limit.take(now, units)
    if (!this.closed) for (const limit of limits) limit.maintain(now)
    let retryAfterMs = 0
    for (const limit of refusing) retryAfterMs = Math.max(retryAfterMs, limit.retryAfterMs(now, units))
    return {
      allowed: refusing.length === 0,
      violated: refusing.map((limit) => limit.name),
      retryAfterSeconds: refusing.length === 0 ? 0 : Math.max(1, Math.ceil(retryAfterMs / 1000)),
      policies: limits.map((limit) => limit.state(now)),
    }
  }

  /** An admitted request that was not forwarded after all (refused later by the gateway): give its units back. */
  refund(subjects: readonly LimitSubject[], units = 1): void {
    const now = this.now()
    for (const limit of this.applicable(subjects, now)) limit.giveBack(now, units)
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
    return this.applicable(subjects, now).every((limit) => limit.ready(now, units))
  }

  /**
   * Starts the first lease of every limit of these subjects not known yet (or the renewal of a
   * starved one), and resolves when they have answered or after `maxWaitMs` (never rejects),
   * saying whether it gave up waiting. The
   * proxy awaits it only for such a limit: a new tenant's first request, or the second of a burst
   * after an idle second, waits one round trip instead of being refused.
   */
  async warm(subjects: readonly LimitSubject[], maxWaitMs = WARM_WAIT_MS, units = 1): Promise<{ timedOut: boolean }> {
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
        const cold = this.applicable(subjects, now).filter((limit) => !limit.ready(now, units))
        if (cold.length === 0) break
        for (const limit of cold) limit.ask(this.now(), units)
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
  async admitWhenWarm(subjects: readonly LimitSubject[], maxWaitMs = WARM_WAIT_MS, units = 1): Promise<Decision> {
    const deadline = this.now() + maxWaitMs
    for (;;) {
      // Timed out by its own timer too: a timer may fire a little before Date.now() reaches its
      // end (libuv counts from the loop's start), which must not make a cold limit a 429.
      const { timedOut } = await this.warm(subjects, Math.max(1, deadline - this.now()), units)
      const decision = this.admit(subjects, units)
      const now = this.now()
      const late = timedOut || now >= deadline
      if (!decision.allowed && late && this.applicable(subjects, now).some((limit) => limit.mode === 'cold'))
        return { ...decision, undecided: true }
      if (decision.allowed || late || this.closed) return decision
      const starved = this.applicable(subjects, now).some(
        (limit) => decision.violated.includes(limit.name) && limit.starved(now, units),
      )
      if (!starved) return decision
    }
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
      if (now - limit.lastAttemptAt >= FORGET_AFTER_MS && !limit.inflight) {
        this.limits.delete(name)
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
    await Promise.all(
      limits.map(async (limit) => {
        await limit.settled()
        await limit.release(this.now()).catch(() => {})
      }),
    )
  }
}
