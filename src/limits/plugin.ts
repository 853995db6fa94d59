// The limiter (docs/internals.md, limits) as a plugin: its Redis connection (none in embedded
// mode: every limit is then enforced in this process), the month's use read from Postgres when
// Redis has lost it, and its leases given back when the app closes.
import fp from 'fastify-plugin'
import { openRedis, type RedisTarget } from '../cache/redis-topology.js'
import { REDIS_CONNECTION } from '../cache/settings.js'
import { DEFAULT_LEASE_TIMINGS, type LeaseTimings } from './lease-store.js'
import { Limiter } from './limiter.js'
import type { Sql } from '../store/db.js'
import { monthUse } from './store.js'
import { readCreditUse } from '../store/credit-grants.js'

declare module 'fastify' {
  interface FastifyInstance {
    limiter: Limiter
  }
}

export interface LimitsPluginOptions {
  sql: Sql
  /** Unset: embedded mode. */
  redis?: RedisTarget | undefined
  keyPrefix: string
  timings?: Partial<LeaseTimings> | undefined
  /** How long a request waits at most for its limits' first answers (the limiter's default when unset). */
  warmWaitMs?: number | undefined
}

export const limitsPlugin = fp<LimitsPluginOptions>(
  async (app, { sql, redis: target, keyPrefix, timings, warmWaitMs }) => {
    const metrics = app.metrics.limits
    const meter = app.usageMeter
    // A connection of its own: the cache's gives a command 50 ms, and a lease call that misses its
    // deadline sends the replica into its degraded mode (each replica on its own: k replicas may
    // admit k times a limit). A lease call is background work, so it gets the lease store's 250 ms,
    // which the store judges itself (lease-store.ts, within): ioredis's own timeout, twice that,
    // only ends a command that is never answered, and must not fail an answer already arrived.
    const redis =
      target === undefined
        ? null
        : openRedis(target, {
            ...REDIS_CONNECTION,
            enableOfflineQueue: false,
            maxRetriesPerRequest: 0,
            commandTimeout: 2 * { ...DEFAULT_LEASE_TIMINGS, ...timings }.callTimeoutMs,
          })
    // Failures are counted by the limiter (tgw_limit_lease_failures_total) and logged nowhere else.
    redis?.on('error', () => {})
    metrics.degraded.set(0)
    const limiter = new Limiter({
      redis,
      keyPrefix,
      ...(timings === undefined ? {} : { timings }),
      ...(warmWaitMs === undefined ? {} : { warmWaitMs }),
      // This replica's counts go to Postgres before a month is read (writeUsage); what a replica's
      // meter had not written when it was read, that replica counts again (unwrittenForMs).
      async loadMonthUse(subject, month) {
        return monthUse(
          sql,
          { tenantId: subject.tenantId, level: subject.level === 'account' ? 'account' : 'sub_account' },
          month,
          subject.meter,
        )
      },
      // Credits: what the meter's flushes burned from the grants (store/usage.ts), and the debt.
      loadCreditUse: (subject) => readCreditUse(sql, subject.tenantId, subject.meter),
      unwrittenForMs: () => meter.lagMs(),
      writeUsage: () => meter.flush(),
      metrics: {
        leaseRequests: metrics.leaseCalls,
        leaseFailures: metrics.leaseFailures,
        unitsTaken: metrics.unitsTaken,
        unitsReturned: metrics.unitsReturned,
        degraded: (down) => metrics.degraded.set(down ? 1 : 0),
      },
    })
    app.decorate('limiter', limiter)
    // Runs before the usage meter's (onClose hooks run last registered first): leases go back
    // while Redis is still open.
    app.addHook('onClose', async () => {
      await limiter.close()
      redis?.disconnect()
    })
  },
  { name: 'limits', dependencies: ['metrics', 'usage-meter'] },
)
