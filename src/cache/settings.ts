// What the tenancy cache is given: where misses go, how long it keeps what it holds, how it backs
// off, and how it connects to Redis. docs/internals.md (caches) explains the figures;
// docs/configuration.md the ones a deployment sets.
import type { FastifyBaseLogger } from 'fastify'
import type { RedisTarget } from './redis-topology.js'
import type { CacheMetrics } from './metrics.js'
import type { TenancyLookups } from '../shared/tenancy-records.js'

export interface CacheTimings {
  /** In-process TTL of a found record: how long a lost invalidation can go unnoticed. */
  localTtlMs: number
  /** In-process and Redis TTL of "not found", so a flood of one unknown key stays off Postgres. */
  negativeTtlMs: number
  redisTtlMs: number
  /** While Postgres cannot answer, a record seen this recently is still used (docs/internals.md). */
  staleWindowMs: number
  /** After a failed or timed-out Redis command, Redis is skipped for this long. */
  redisBackoffMs: number
  /**
   * After a failed or timed-out Postgres lookup, Postgres is skipped for this long: the stale
   * window or a 503 answers at once, instead of each lookup of a request waiting its deadline.
   */
  postgresBackoffMs: number
  /** An invalidation is sent again after this long, to catch a fill that raced the first one. */
  reinvalidateAfterMs: number
  maxEntries: number
  /**
   * What the in-process entries may take together, estimated from their JSON: an entry count
   * alone would let records with long scope lists (up to 50 × 100 characters a key) outgrow the
   * heap (the image caps it at 160 MiB).
   */
  maxEstimatedBytes: number
}

export const DEFAULT_TIMINGS: CacheTimings = {
  localTtlMs: 5_000,
  negativeTtlMs: 2_000,
  redisTtlMs: 60_000,
  staleWindowMs: 5 * 60_000,
  redisBackoffMs: 1_000,
  postgresBackoffMs: 1_000,
  reinvalidateAfterMs: 1_000,
  maxEntries: 100_000,
  maxEstimatedBytes: 64 * 1024 * 1024,
}

// What every connection of the gateway to Redis shares. ioredis 6 opens a RESP3 connection with
// HELLO, which a client without an offline queue fails to send at connect; RESP2 needs none.
export const REDIS_CONNECTION = {
  protocol: 2,
  connectTimeout: 2_000,
  retryStrategy: (attempt: number) => Math.min(attempt * 200, 2_000),
} as const

/** A Redis command may take this long before the gateway gives up and asks Postgres. */
export const REDIS_COMMAND_TIMEOUT_MS = 50

export interface TenancyCacheOptions {
  /** Where misses go: Postgres. */
  source: TenancyLookups
  /** Unset: in-process cache only (one replica, docs/configuration.md). */
  redis?: RedisTarget | undefined
  /** Prefix of every Redis key and of the invalidation channel, so deployments can share a Redis. */
  keyPrefix: string
  timings?: Partial<CacheTimings>
  log: FastifyBaseLogger
  metrics: CacheMetrics
  /** How many failed invalidations are remembered for when Redis is back (default 10,000). */
  maxUnsentKeys?: number
}
