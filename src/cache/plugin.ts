// The tiered cache of the tenancy lookups (docs/internals.md, caches) as a plugin: opens its
// Redis connections, decorates the app with it, and lets them go when the app closes.
import fp from 'fastify-plugin'
import { TenancyCache, type CacheTimings } from './index.js'
import type { Sql } from '../store/db.js'
import { storeDeadlinesOf } from '../store/deadlines.js'
import { postgresLookups } from '../store/tenancy-lookups.js'
import type { RedisTarget } from './redis-topology.js'

declare module 'fastify' {
  interface FastifyInstance {
    tenancyCache: TenancyCache
  }
}

export interface TenancyCachePluginOptions {
  /** Where misses go. */
  sql: Sql
  /** Unset: in-process cache only (one replica). */
  redis?: RedisTarget | undefined
  keyPrefix: string
  timings?: Partial<CacheTimings> | undefined
}

export const tenancyCachePlugin = fp<TenancyCachePluginOptions>(
  async (app, { sql, redis, keyPrefix, timings }) => {
    const { storeLookups, postgresKeyDigests } = app.metrics.cache
    const counts = { query: () => storeLookups.postgres.inc(), keyDigests: (n: number) => postgresKeyDigests.inc(n) }
    const { lookupMs, lookupIntervalMs } = storeDeadlinesOf(app)
    const cache = new TenancyCache({
      source: postgresLookups(sql, { counts, deadlineMs: lookupMs, keyPacing: { intervalMs: lookupIntervalMs } }),
      redis,
      keyPrefix,
      timings,
      log: app.log,
      metrics: app.metrics.cache,
    })
    app.decorate('tenancyCache', cache)
    // Runs after the usage meter's (onClose hooks run last registered first): the invalidations
    // still due go out, then Redis is let go.
    app.addHook('onClose', () => cache.close())
  },
  { name: 'tenancy-cache', dependencies: ['metrics'] },
)
