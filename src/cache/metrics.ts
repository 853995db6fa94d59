// The tenancy lookups' metrics (docs/operations.md): which cache tier answered, what went on to
// Postgres, and the Redis connections and masters the cache uses. Here rather than in
// ops/metrics.ts, as limits/ keeps its own: the cache, the key batcher, the token endpoint and the portal feed them.
import { Counter, Gauge, type Registry } from 'prom-client'
import type { LatencySeries } from '../shared/fast-metrics.js'

export interface CacheMetrics {
  /**
   * redis: lookups the in-process cache missed and Redis answered. postgres: queries the lookups
   * sent to Postgres, answered or not; key lookups share paced queries (store/key-lookup-batcher.ts).
   */
  readonly storeLookups: { readonly redis: Counter.Internal; readonly postgres: Counter.Internal }
  /** Key digests the Postgres key queries asked for (over tier="postgres": digests per query). */
  readonly postgresKeyDigests: Counter
  /** Client ids the token endpoint's paced Postgres queries asked for. */
  readonly postgresClientIds: Counter
  /** Portal credentials (session tokens, cookies, link tokens) the portal's paced Postgres queries asked for. */
  readonly postgresPortalCredentials: Counter
  readonly cacheHits: { readonly local: Counter.Internal; readonly redis: Counter.Internal }
  readonly cacheMisses: { readonly local: Counter.Internal; readonly redis: Counter.Internal }
  /** Background refreshes started for in-process entries in use, failed ones included (cache/tiered.ts). */
  readonly cacheRefreshes: Counter
  readonly invalidationsReceived: Counter
  /** Redis entries a lookup passed over: older than what this replica knew of them (cache/tiered.ts). */
  readonly redisStaleEntries: Counter
  readonly redisErrors: Counter
  /** 1 while the connection is ready, by connection (commands, subscriber). */
  readonly redisUp: {
    readonly commands: Gauge.Internal<'connection'>
    readonly subscriber: Gauge.Internal<'connection'>
  }
  /** 1 for each Redis master the gateway's commands go to now, by address (cache/redis-masters.ts). */
  readonly redisMaster: Gauge<'address'>
  /** Changes of master (a failover, or a cluster's master replaced) seen since the start. */
  readonly redisMasterChanges: Counter
  /**
   * How long a lookup waited on Redis before it had the entry or went on to Postgres
   * (tgw_redis_wait_seconds{wait="lookup"}, cache/tiered.ts).
   */
  readonly lookupWait: LatencySeries
}

export function cacheMetrics(registers: Registry[]): Omit<CacheMetrics, 'lookupWait'> {
  const storeLookups = new Counter({
    name: 'tgw_store_lookups_total',
    help: 'Tenancy lookups that missed the in-process cache: redis, those Redis answered; postgres, the queries sent to Postgres (one per batch of key digests)',
    labelNames: ['tier'] as const,
    registers,
  })
  const cacheHits = new Counter({
    name: 'tgw_cache_hits_total',
    help: 'Tenancy lookups a cache tier answered (local: in-process, redis)',
    labelNames: ['tier'] as const,
    registers,
  })
  const cacheMisses = new Counter({
    name: 'tgw_cache_misses_total',
    help: 'Tenancy lookups a cache tier could not answer (redis: absent, failed or skipped while down)',
    labelNames: ['tier'] as const,
    registers,
  })
  const redisUp = new Gauge({
    name: 'tgw_redis_up',
    help: '1 while the Redis connection is ready, else 0 (absent without Redis)',
    labelNames: ['connection'] as const,
    registers,
  })
  return {
    storeLookups: { redis: storeLookups.labels('redis'), postgres: storeLookups.labels('postgres') },
    postgresKeyDigests: new Counter({
      name: 'tgw_postgres_key_digests_total',
      help: 'Key digests looked up in Postgres; several share one query under load (tgw_store_lookups_total{tier="postgres"})',
      registers,
    }),
    postgresClientIds: new Counter({
      name: 'tgw_postgres_client_ids_total',
      help: 'Client ids of token requests looked up in Postgres; several share one query under load (tgw_store_lookups_total{tier="postgres"})',
      registers,
    }),
    postgresPortalCredentials: new Counter({
      name: 'tgw_postgres_portal_credentials_total',
      help: 'Portal session tokens, cookies and link tokens looked up in Postgres; several share one query under load (tgw_store_lookups_total{tier="postgres"})',
      registers,
    }),
    cacheHits: { local: cacheHits.labels('local'), redis: cacheHits.labels('redis') },
    cacheMisses: { local: cacheMisses.labels('local'), redis: cacheMisses.labels('redis') },
    cacheRefreshes: new Counter({
      name: 'tgw_cache_refreshes_total',
      help: 'Background refreshes started for in-process entries in use, before they expired (failed ones included)',
      registers,
    }),
    invalidationsReceived: new Counter({
      name: 'tgw_cache_invalidations_received_total',
      help: 'Invalidation messages received from the Redis bus (each names one or more entries)',
      registers,
    }),
    redisStaleEntries: new Counter({
      name: 'tgw_cache_redis_stale_total',
      help: 'Redis entries a lookup passed over for Postgres because they were older than what this replica knew (an invalidation it applied, a newer read): Redis gave back what a change had deleted, as after a failover that lost writes',
      registers,
    }),
    redisErrors: new Counter({
      name: 'tgw_redis_errors_total',
      help: 'Redis commands that failed or timed out (the gateway fell back to Postgres)',
      registers,
    }),
    redisUp: { commands: redisUp.labels('commands'), subscriber: redisUp.labels('subscriber') },
    redisMaster: new Gauge({
      name: 'tgw_redis_master',
      help: "1 for each Redis master the gateway's commands go to now, by host:port (one, or a cluster's masters)",
      labelNames: ['address'] as const,
      registers,
    }),
    redisMasterChanges: new Counter({
      name: 'tgw_redis_master_changes_total',
      help: 'Times the Redis master (or a cluster master) changed since the start: failovers seen',
      registers,
    }),
  }
}
