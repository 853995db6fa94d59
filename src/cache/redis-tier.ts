// The second tier of the tenancy lookups (cache/tiered.ts): Redis, shared by the replicas, with a
// longer TTL. An entry is read with its generation and its stamp, taken only when it is no older
// than what this replica knows, and stored only under the generation read before Postgres was
// asked (docs/internals.md, caches).
import type { FastifyBaseLogger } from 'fastify'
import { LRUCache } from 'lru-cache'
import type { RequestTrace } from '../shared/request-trace.js'
import { entryKey, generationKey, stampKey } from './entry-names.js'
import type { CacheMetrics } from './metrics.js'
import { OutageNotice } from './outage-notice.js'
import { connectCommandClient, pingWithin, storeIfUnchanged, withinMs } from './redis-commands.js'
import { type RedisClient, type RedisTarget, variableOf } from './redis-topology.js'
import { REDIS_COMMAND_TIMEOUT_MS, type CacheTimings } from './settings.js'

export interface RedisTierOptions {
  target: RedisTarget
  keyPrefix: string
  timings: CacheTimings
  log: FastifyBaseLogger
  metrics: CacheMetrics
  /** The command connection is ready (again): what Redis did not take may be sent now. */
  ready(): void
}

/**
 * What Redis said of an entry: `found` with its value, or not (absent, older than what this
 * replica knows, or Redis failed), with the generation to store a value read elsewhere under
 * (null: Redis was not asked, so nothing is stored there either).
 */
export type RedisRead<T> =
  | { found: true; value: T | null; stampedAt: number }
  | { found: false; generation: string | null }

export class RedisTier {
  readonly commands: RedisClient
  /** Redis's outages, said once as they begin, once a minute, and as they end. */
  readonly outage: OutageNotice
  private readonly options: RedisTierOptions
  private skipUntil = 0
  /**
   * Per entry, the instant from which an invalidation applied here says Redis must hold a newer
   * entry: one stamped before is what the change deleted, given back by Redis (see stampKey). Kept
   * as long as such an entry can live in Redis.
   */
  private readonly invalidatedAt: LRUCache<string, number>
  /**
   * Every Redis entry stamped before this is older than what this replica knows: the latest
   * invalidation `invalidatedAt` had to let go for room, or the last change of Redis master seen.
   */
  private trustedFrom = 0
  /** Stores into Redis under way (store): awaited at close, so that none fails on it. */
  private readonly storesUnderWay = new Set<Promise<unknown>>()

  constructor(options: RedisTierOptions) {
    this.options = options
    /** The variable that names the Redis, for warnings (REDIS_SENTINELS, REDIS_CLUSTER_NODES or REDIS_URL). */
    const redisVariable = variableOf(options.target)
    this.outage = new OutageNotice(options.log, {
      failed: `redis (${redisVariable}) failed; using postgres until it answers again`,
      recovered: `redis (${redisVariable}) answers again`,
    })
    this.invalidatedAt = new LRUCache<string, number>({
      // A count as a size: as `max` would bound it, without allocating its slots up front.
      maxSize: options.timings.maxEntries,
      sizeCalculation: () => 1,
      ttl: options.timings.redisTtlMs,
      dispose: (at, _key, reason) => {
        if (reason === 'evict') this.trustedFrom = Math.max(this.trustedFrom, at)
      },
    })
    const up = options.metrics.redisUp.commands
    this.commands = connectCommandClient(options.target, {
      failed: (err) => this.failed(err),
      down: () => up.set(0),
      ready: () => {
        up.set(1)
        this.outage.recovered('commands')
        options.ready()
      },
    })
  }

  /** The command connection, unless it is down or backing off after a failure. */
  usable(): RedisClient | null {
    if (this.commands.status !== 'ready' || Date.now() < this.skipUntil) return null
    return this.commands
  }

  failed(err: unknown): void {
    this.options.metrics.redisErrors.inc()
    this.outage.failed('commands', err)
    this.skipUntil = Date.now() + this.options.timings.redisBackoffMs
  }

  /**
   * The entry from Redis, if it is no older than what this replica knows (knownAsOf; `heldAsOf`
   * tells when the read behind its own entry began); `trace` gets the command's span.
   */
  async read<T>(key: string, heldAsOf: () => number, trace: RequestTrace | null): Promise<RedisRead<T>> {
    const redis = this.usable()
    if (redis === null) return { found: false, generation: null }
    const { metrics, keyPrefix: prefix } = this.options
    let generation: string | null = null
    const askedAt = performance.now()
    const span = trace?.work('MGET', { system: 'redis', operation: 'MGET' })
    let failure: string | undefined
    try {
      // The entry, its generation and its stamp share a hash tag (entry-names.ts): one slot on a cluster.
      const [raw, seenGeneration, stamp] = await withinMs(
        redis.mget(entryKey(prefix, key), generationKey(prefix, key), stampKey(prefix, key)),
        REDIS_COMMAND_TIMEOUT_MS,
      )
      generation = seenGeneration ?? ''
      // A command answered: an outage of the commands connection (a timeout, say) is over.
      this.outage.recovered('commands')
      if (typeof raw === 'string') {
        const stampedAt = Number(stamp ?? 0) || 0
        if (stampedAt >= this.knownAsOf(key, heldAsOf())) {
          metrics.storeLookups.redis.inc()
          metrics.cacheHits.redis.inc()
          return { found: true, value: JSON.parse(raw) as T | null, stampedAt }
        }
        // Older than what this replica knows: Postgres instead, whose value then replaces it in
        // Redis (its generation has not moved).
        metrics.redisStaleEntries.inc()
      }
    } catch (err) {
      failure = (err as { code?: string }).code ?? (err as Error).name
      this.failed(err)
    } finally {
      span?.end(failure)
      metrics.lookupWait.observe((performance.now() - askedAt) / 1_000)
    }
    return { found: false, generation }
  }

  /**
   * The instant before which a Redis entry is older than what this replica knows of it: the read
   * behind its own entry (`heldAsOf`), an invalidation applied here. Compared with a stamp another
   * replica's clock made: clocks kept by NTP agree far closer than a fill and the change it missed
   * are apart (docs/decisions/0226-a-replica-never-takes-from-redis-an-entry-older.md).
   */
  private knownAsOf(key: string, heldAsOf: number): number {
    return Math.max(heldAsOf, this.invalidatedAt.get(key) ?? 0, this.trustedFrom)
  }

  /** Stores a value read from Postgres, unless the entry was invalidated since `generation` was read. */
  store(key: string, value: unknown, generation: string, readAt: number): void {
    const redis = this.usable()
    if (redis === null) return
    const { timings, keyPrefix: prefix } = this.options
    const ttl = value === null ? timings.negativeTtlMs : timings.redisTtlMs
    const store = storeIfUnchanged(
      redis,
      { key: entryKey(prefix, key), generationKey: generationKey(prefix, key), stampKey: stampKey(prefix, key) },
      generation,
      { json: JSON.stringify(value), readAt },
      ttl,
    )
      .catch((err: unknown) => this.failed(err))
      .finally(() => this.storesUnderWay.delete(store))
    this.storesUnderWay.add(store)
  }

  /** Resolves once every store into Redis begun so far has ended (stored, or failed). */
  async stored(): Promise<void> {
    await Promise.all(this.storesUnderWay)
  }

  /** An invalidation of `key` was applied here at `at`: a Redis entry stamped before is what it deleted. */
  invalidated(key: string, at: number): void {
    this.invalidatedAt.set(key, at)
  }

  /** Stops taking any Redis entry stored before now: each is read from Postgres again, once. */
  distrust(): void {
    this.trustedFrom = Date.now()
  }

  ping(timeoutMs: number): Promise<'ok' | 'down'> {
    return pingWithin(this.commands, timeoutMs)
  }

  disconnect(): void {
    this.commands.disconnect()
  }
}
