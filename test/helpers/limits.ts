// Driving limiters as replicas in the limits tests: clients as the gateway opens them, a Redis
// that has been in use for a while, offers at a pace, and the window bound checked on what passed.
import { Redis } from 'ioredis'
import { REDIS_CONNECTION } from '../../src/cache/settings.js'
import { limitKeys } from '../../src/limits/keys.js'
import type { LeaseTimings } from '../../src/limits/lease-store.js'
import { Limiter } from '../../src/limits/limiter.js'
import type { LimiterMetrics, LimitSubject, LoadMonthUse } from '../../src/limits/types.js'
import { sleep } from './poll.js'
import type { TestLike } from './test-like.js'

/**
 * The limits' timings for a test about what they let through, not how fast Redis answers: a busy
 * machine can hold a lease call past the 250 ms it gets in production (the replica then decides
 * on its own for a while: degraded, where exact counts do not hold), and a quota's first answer (a
 * lease call, a month read from Postgres, a second call) past the 300 ms a request waits for it
 * (the request is then a 503 to retry).
 */
export const UNHURRIED_LIMITS = { limitTimings: { callTimeoutMs: 2_000 }, limitWarmWaitMs: 10_000 } as const

/** A client like the gateway's: no offline queue, no retries (the lease store bounds each call). */
export function limiterClient(t: TestLike, url: string): Redis {
  const client = new Redis(url, { ...REDIS_CONNECTION, enableOfflineQueue: false, maxRetriesPerRequest: 0 })
  client.on('error', () => {})
  t.teardown(() => client.disconnect())
  return client
}

/**
 * Marks the Redis data under `prefix` as born a minute ago, as on a Redis in use: otherwise the
 * first 2 s of a test fall in the grace that follows an empty Redis (docs/internals.md).
 */
export async function agedRedis(redis: Redis, prefix: string): Promise<void> {
  const born = String(Date.now() - 60_000)
  for (const key of limitKeys.incarnations(prefix)) await redis.set(key, born)
}

/**
 * When replicas were degraded (Redis unusable: each enforced its limits alone), from the gauge's
 * changes: a bound that allows for degraded mode's own allowance needs how long it lasted.
 */
export class DegradedSpells {
  /** Spells begun, over all replicas. */
  count = 0
  private longest = 0
  private readonly since = new Map<number, number>()

  metricsOf(replica: number): LimiterMetrics {
    return {
      degraded: (down) => {
        const now = preciseNow()
        if (down) {
          this.count++
          this.since.set(replica, now)
          return
        }
        const from = this.since.get(replica)
        if (from !== undefined) this.longest = Math.max(this.longest, now - from)
        this.since.delete(replica)
      },
    }
  }

  /** The longest spell of any replica, ms; one not over yet counts up to now. */
  longestMs(): number {
    const now = preciseNow()
    return Math.max(this.longest, ...[...this.since.values()].map((from) => now - from))
  }
}

export function replicas(
  t: TestLike,
  count: number,
  options: {
    url: string
    prefix: string
    loadMonthUse?: LoadMonthUse
    sweepEveryMs?: number
    timings?: Partial<LeaseTimings>
    spells?: DegradedSpells
  },
): Limiter[] {
  return Array.from({ length: count }, (_, replica) => {
    const limiter = new Limiter({
      redis: limiterClient(t, options.url),
      keyPrefix: options.prefix,
      loadMonthUse: options.loadMonthUse ?? (async () => 0),
      ...(options.sweepEveryMs === undefined ? {} : { sweepEveryMs: options.sweepEveryMs }),
      ...(options.timings === undefined ? {} : { timings: options.timings }),
      ...(options.spells === undefined ? {} : { metrics: options.spells.metricsOf(replica) }),
    })
    t.teardown(() => limiter.close())
    return limiter
  })
}

/** Precise wall-clock ms, the clock Redis's TIME shares on this machine. */
export const preciseNow = () => performance.timeOrigin + performance.now()

/**
 * Offers `perSecond` requests a second for `ms`, each to `pick(i)`, and returns the instants the
 * admitted ones passed at.
 */
export async function offer(
  perSecond: number,
  ms: number,
  pick: (i: number) => Limiter,
  subjects: readonly LimitSubject[],
): Promise<{ admitted: number[]; admittedFrom: number[]; offered: number; start: number }> {
  const start = preciseNow()
  const admitted: number[] = []
  const admittedFrom: number[] = []
  let offered = 0
  for (;;) {
    const elapsed = preciseNow() - start
    if (elapsed >= ms) break
    const due = Math.floor((elapsed * perSecond) / 1000)
    while (offered < due) {
      const before = preciseNow()
      if (pick(offered).admit(subjects).allowed) {
        admitted.push(preciseNow())
        admittedFrom.push(before)
      }
      offered++
    }
    await sleep(1)
  }
  return { admitted, admittedFrom, offered, start }
}

/**
 * The tightest window over `admitted` (sorted instants, ms): the most that passed beyond N + N·t/W
 * in any window between two admissions (<= 0 when the bound holds), and where (`from`: its first).
 * `admittedFrom`, when known, holds the instant read before each admission: the machine may take
 * the CPU from the process between an admission and the clock read after it (for milliseconds,
 * beside a CPU hog), so a window runs from the first's instant before to the last's after.
 */
export function worstWindow(
  admitted: readonly number[],
  rate: { requests: number; perSeconds: number },
  admittedFrom: readonly number[] = admitted,
): { excess: number; count: number; seconds: number; from: number } {
  let worst = { excess: Number.NEGATIVE_INFINITY, count: 0, seconds: 0, from: 0 }
  for (let i = 0; i < admitted.length; i++) {
    for (let j = i; j < admitted.length; j++) {
      const seconds = (admitted[j]! - admittedFrom[i]!) / 1000
      const count = j - i + 1
      const excess = count - (rate.requests + (rate.requests * seconds) / rate.perSeconds)
      if (excess > worst.excess) worst = { excess, count, seconds, from: admittedFrom[i]! }
    }
  }
  return worst
}
