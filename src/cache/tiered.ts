// The tiered read path of the tenancy lookups (docs/internals.md, caches): a bounded
// in-process LRU with a short TTL, in front of Redis (longer TTL, shared by the replicas), in front
// of Postgres. Changes reach it through the invalidation bus (cache/invalidation.ts).
import { LRUCache } from 'lru-cache'
import { ApiError } from '../errors.js'
import type { RequestTrace } from '../shared/request-trace.js'
import type { KeyRecord, PlanRecord, TenancyLookups, TenantRecord } from '../shared/tenancy-records.js'
import { InvalidationBus, type CacheInvalidator } from './invalidation.js'
import { cacheKeys, entryKey, type EvictionListener, generationKey, stampKey } from './entry-names.js'
import { connectCommandClient, pingWithin, storeIfUnchanged, withinMs } from './redis-commands.js'
import { OutageNotice } from './outage-notice.js'
import { MasterWatch, type RedisMasters } from './redis-masters.js'
import { type RedisClient, type RedisTarget, variableOf } from './redis-topology.js'
import { REDIS_COMMAND_TIMEOUT_MS, DEFAULT_TIMINGS, type CacheTimings, type TenancyCacheOptions } from './settings.js'

interface Entry {
  readonly value: unknown
  readonly storedAt: number
  /** When the Postgres read behind the value began (Date.now()): what this replica knows of the entry. */
  readonly asOf: number
  /**
   * From this instant (Date.now()) a read of the entry still gets it at once, and starts one
   * fill in the background to replace it; Infinity for "not found", which simply expires.
   */
  readonly refreshAt: number
}

/** An entry's share of the heap, roughly: its JSON as two-byte characters, and the objects around it. */
function estimatedBytes(entry: Entry): number {
  return 2 * (JSON.stringify(entry.value)?.length ?? 0) + 256
}

export class TenancyCache implements CacheInvalidator {
  readonly lookups: TenancyLookups
  private readonly timings: CacheTimings
  private readonly local: LRUCache<string, Entry>
  private readonly inflight = new Map<string, Promise<unknown>>()
  private readonly redis: RedisClient | null
  private readonly bus: InvalidationBus | null
  private readonly masterWatch: MasterWatch | null
  private readonly prefix: string
  /** The variable that names the Redis, for warnings (REDIS_SENTINELS, REDIS_CLUSTER_NODES or REDIS_URL). */
  private readonly redisVariable: string
  /** Redis's outages, said once as they begin, once a minute, and as they end. */
  private readonly outage: OutageNotice
  /** Bumped by every eviction: a fill that started before one must not store what it read. */
  private epoch = 0
  /** How long a proxied route may reuse an admission (tenancy/recent-admissions.ts): a fifth of the TTL, at most 1 s. */
  private readonly reuseWindowMs: number
  /**
   * The in-process TTL of a found record, shortened by that window, so that a reused admission
   * never outlives the configured TTL (docs/internals.md: a lost invalidation is bounded by it).
   */
  private readonly foundTtlMs: number
  /**
   * A found record read in the second half of its in-process TTL is refreshed in the background,
   * so that an entry in use never expires and no request waits for Redis or Postgres once warm.
   * Half, so that a proxied route, which reads its entries once per admission window (up to 1 s
   * apart, and a little more when the event loop is busy), reads each at least once in that half.
   * A refresh only reads the stores again: it cannot make an entry staler.
   */
  private readonly refreshAfterMs: number
  /**
   * Entries stored before this instant are no longer trusted (the bus may have missed messages),
   * but stay for the stale window: while Postgres is down they are all a known key has.
   */
  private trustedFrom = 0
  private redisSkipUntil = 0
  /** After a Postgres lookup failed (or missed its deadline), lookups skip Postgres until then. */
  private postgresSkipUntil = 0
  /** Told of every name invalidated here or over the bus, and null when messages may have been lost. */
  private readonly evictListeners: EvictionListener[] = []
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
  private redisTrustedFrom = 0
  /** Stores into Redis under way (storeInRedis): awaited at close, so that none fails on it. */
  private readonly storesUnderWay = new Set<Promise<unknown>>()

  private readonly options: TenancyCacheOptions
  constructor(options: TenancyCacheOptions) {
    this.options = options
    this.timings = { ...DEFAULT_TIMINGS, ...options.timings }
    this.prefix = options.keyPrefix
    this.redisVariable = options.redis === undefined ? 'REDIS_URL' : variableOf(options.redis)
    this.outage = new OutageNotice(options.log, {
      failed: `redis (${this.redisVariable}) failed; using postgres until it answers again`,
      recovered: `redis (${this.redisVariable}) answers again`,
    })
    this.reuseWindowMs = Math.min(1_000, Math.floor(this.timings.localTtlMs / 5))
    this.foundTtlMs = this.timings.localTtlMs - this.reuseWindowMs
    this.refreshAfterMs = Math.floor(this.foundTtlMs / 2)
    // Bounded by bytes here and by count in remember(), never by lru-cache's `max`: that allocates
    // arrays of `max` slots at once (100,000 by default), a cost every app paid at its start.
    this.local = new LRUCache<string, Entry>({
      maxSize: this.timings.maxEstimatedBytes,
      sizeCalculation: estimatedBytes,
      ttl: this.foundTtlMs,
      // Expired entries stay (until the LRU pushes them out) for the stale window.
      noDeleteOnStaleGet: true,
    })
    this.invalidatedAt = new LRUCache<string, number>({
      // A count as a size: as `max` would bound it, without allocating its slots up front.
      maxSize: this.timings.maxEntries,
      sizeCalculation: () => 1,
      ttl: this.timings.redisTtlMs,
      dispose: (at, _key, reason) => {
        if (reason === 'evict') this.redisTrustedFrom = Math.max(this.redisTrustedFrom, at)
      },
    })
    this.redis = options.redis === undefined ? null : this.connectCommands(options.redis)
    // A new master may lack the deletes the old one took (a replica promoted before they reached
    // it): what Redis holds from before is read from Postgres again, as after a restart.
    this.masterWatch =
      this.redis === null ? null : new MasterWatch(this.redis, options.metrics, () => this.distrustRedis())
    this.bus =
      options.redis === undefined || this.redis === null
        ? null
        : new InvalidationBus({
            redis: options.redis,
            keyPrefix: this.prefix,
            commands: this.redis,
            timings: this.timings,
            log: options.log,
            metrics: options.metrics,
            maxUnsentKeys: options.maxUnsentKeys,
            evict: (keys) => this.evictLocal(keys),
            distrustLocal: () => this.clearLocal(),
            redisFailed: (err) => this.redisFailed(err),
            outage: this.outage,
          })
    this.lookups = this.cachedLookups(options.source)
  }

  private connectCommands(target: RedisTarget): RedisClient {
    const up = this.options.metrics.redisUp.commands
    return connectCommandClient(target, {
      failed: (err) => this.redisFailed(err),
      down: () => up.set(0),
      ready: () => {
        up.set(1)
        this.outage.recovered('commands')
        this.bus?.resendUnsent()
      },
    })
  }

  /** The lookups through the tiers; with `trace`, the Redis and Postgres calls a fill makes are its spans. */
  private cachedLookups(source: TenancyLookups, trace: RequestTrace | null = null): TenancyLookups {
    return {
      keyByDigest: (keyDigest) =>
        this.read<KeyRecord>(cacheKeys.key(keyDigest), () => source.keyByDigest(keyDigest), trace),
      keyById: (id) => this.read<KeyRecord>(cacheKeys.keyById(id), () => source.keyById(id), trace),
      tenant: (id) => this.read<TenantRecord>(cacheKeys.tenant(id), () => source.tenant(id), trace),
      subAccount: (parentId, id) =>
        this.read<TenantRecord>(cacheKeys.subAccount(parentId, id), () => source.subAccount(parentId, id), trace),
      subAccountIdByExternalId: (parentId, externalId) =>
        this.read<string>(
          cacheKeys.externalId(parentId, externalId),
          () => source.subAccountIdByExternalId(parentId, externalId),
          trace,
        ),
      hasActiveSubAccounts: async (parentId) =>
        (await this.read<boolean>(cacheKeys.anyActive(parentId), () => source.hasActiveSubAccounts(parentId), trace))!,
      plan: (id) => this.read<PlanRecord>(cacheKeys.plan(id), () => source.plan(id)),
      reuse: { version: () => this.epoch, windowMs: this.reuseWindowMs },
      traced: trace === null ? (requestTrace) => this.cachedLookups(source, requestTrace) : undefined,
    }
  }

  /** The in-process entry, else one shared fill from Redis or Postgres per key at a time. */
  private read<T>(key: string, load: () => Promise<T | null>, trace: RequestTrace | null = null): Promise<T | null> {
    const entry = this.local.get(key, { allowStale: false })
    if (entry !== undefined && entry.storedAt > this.trustedFrom) {
      this.options.metrics.cacheHits.local.inc()
      if (Date.now() >= entry.refreshAt && !this.inflight.has(key)) this.refresh(key, load)
      return Promise.resolve(entry.value as T | null)
    }
    this.options.metrics.cacheMisses.local.inc()
    const pending = this.inflight.get(key)
    if (pending !== undefined) return pending as Promise<T | null>
    // A fill another request started is its: this one waits for it without a span of its own.
    return this.startFill(key, load, trace)
  }

  /** One fill of the entry at a time: later misses of it share this one until it settles. */
  private startFill<T>(
    key: string,
    load: () => Promise<T | null>,
    trace: RequestTrace | null = null,
  ): Promise<T | null> {
    const fill = this.fill(key, load, trace).finally(() => {
      if (this.inflight.get(key) === fill) this.inflight.delete(key)
    })
    this.inflight.set(key, fill)
    return fill
  }

  /**
   * Replaces an entry that is still good, without anyone waiting for it. A failure is not retried
   * here: the entry expires at its time, unless a later read refreshes it first. A failure still
   * counts as one for the backoffs (Redis or Postgres skipped for a moment), as a miss's would.
   */
  private refresh<T>(key: string, load: () => Promise<T | null>): void {
    this.options.metrics.cacheRefreshes.inc()
    this.startFill(key, load).catch(() => {})
  }

  private async fill<T>(key: string, load: () => Promise<T | null>, trace: RequestTrace | null): Promise<T | null> {
    const epoch = this.epoch
    const redis = this.usableRedis()
    // null: Redis was not asked, so nothing is stored there either.
    let generation: string | null = null
    if (redis !== null) {
      const askedAt = performance.now()
      const span = trace?.work('MGET', { system: 'redis', operation: 'MGET' })
      let failure: string | undefined
      try {
        // The entry, its generation and its stamp share a hash tag (entry-names.ts): one slot on a cluster.
        const [raw, seenGeneration, stamp] = await withinMs(
          redis.mget(entryKey(this.prefix, key), generationKey(this.prefix, key), stampKey(this.prefix, key)),
          REDIS_COMMAND_TIMEOUT_MS,
        )
        generation = seenGeneration ?? ''
        // A command answered: an outage of the commands connection (a timeout, say) is over.
        this.outage.recovered('commands')
        if (typeof raw === 'string') {
          const stampedAt = Number(stamp ?? 0) || 0
          if (stampedAt >= this.knownAsOf(key)) {
            this.options.metrics.storeLookups.redis.inc()
            this.options.metrics.cacheHits.redis.inc()
            const value = JSON.parse(raw) as T | null
            if (epoch === this.epoch) this.remember(key, value, stampedAt)
            return value
          }
          // Older than what this replica knows: Postgres instead, whose value then replaces it in
          // Redis (its generation has not moved).
          this.options.metrics.redisStaleEntries.inc()
        }
      } catch (err) {
        failure = (err as { code?: string }).code ?? (err as Error).name
        this.redisFailed(err)
      } finally {
        span?.end(failure)
        this.options.metrics.lookupWait.observe((performance.now() - askedAt) / 1_000)
      }
    }
    this.options.metrics.cacheMisses.redis.inc()

    let value: T | null
    const readAt = Date.now()
    try {
      // Right after Postgres failed, do not make every lookup of a request wait for it again.
      if (Date.now() < this.postgresSkipUntil)
        throw new ApiError('store_unavailable', 'the store cannot be reached; try again')
      // The source counts its Postgres queries (store/tenancy-lookups.ts): key lookups share them.
      const span = trace?.work('SELECT', { system: 'postgresql', operation: 'SELECT' })
      try {
        value = await load()
      } catch (err) {
        span?.end(err instanceof ApiError ? err.code : ((err as { code?: string }).code ?? (err as Error).name))
        throw err
      }
      span?.end()
    } catch (err) {
      if (!(err instanceof ApiError)) this.postgresSkipUntil = Date.now() + this.timings.postgresBackoffMs
      // Postgres cannot answer: a record seen within the stale window still serves; an unknown
      // key is never let through (the error becomes 503 store_unavailable).
      const stale = this.local.get(key, { allowStale: true })
      if (stale !== undefined && Date.now() - stale.storedAt < this.timings.staleWindowMs)
        return stale.value as T | null
      throw err
    }
    if (epoch === this.epoch) {
      this.remember(key, value, readAt)
      if (generation !== null) this.storeInRedis(key, value, generation, readAt)
    }
    return value
  }

  /**
   * The instant before which a Redis entry is older than what this replica knows of it: the read
   * behind its own entry (kept past its TTL, until the LRU needs the room), an invalidation applied
   * here. Compared with a stamp another replica's clock made: clocks kept by NTP agree far closer
   * than a fill and the change it missed are apart
   * (docs/decisions/0226-a-replica-never-takes-from-redis-an-entry-older.md).
   */
  private knownAsOf(key: string): number {
    const held = this.local.peek(key, { allowStale: true })?.asOf ?? 0
    return Math.max(held, this.invalidatedAt.get(key) ?? 0, this.redisTrustedFrom)
  }

  private remember(key: string, value: unknown, asOf: number): void {
    const now = Date.now()
    if (value === null)
      this.local.set(key, { value, storedAt: now, asOf, refreshAt: Infinity }, { ttl: this.timings.negativeTtlMs })
    else
      this.local.set(
        key,
        { value, storedAt: now, asOf, refreshAt: now + this.refreshAfterMs },
        { ttl: this.foundTtlMs },
      )
    // The least recently used goes, as lru-cache's `max` would have it go.
    if (this.local.size > this.timings.maxEntries) this.local.pop()
  }

  /** Stores a value read from Postgres, unless the entry was invalidated since `generation` was read. */
  private storeInRedis(key: string, value: unknown, generation: string, readAt: number): void {
    const redis = this.usableRedis()
    if (redis === null) return
    const ttl = value === null ? this.timings.negativeTtlMs : this.timings.redisTtlMs
    const store = storeIfUnchanged(
      redis,
      {
        key: entryKey(this.prefix, key),
        generationKey: generationKey(this.prefix, key),
        stampKey: stampKey(this.prefix, key),
      },
      generation,
      { json: JSON.stringify(value), readAt },
      ttl,
    )
      .catch((err: unknown) => this.redisFailed(err))
      .finally(() => this.storesUnderWay.delete(store))
    this.storesUnderWay.add(store)
  }

  /** Resolves once every store into Redis begun so far has ended (stored, or failed). */
  async stored(): Promise<void> {
    await Promise.all(this.storesUnderWay)
  }

  /** Resolves once the repeats of every invalidation published here so far have been sent. */
  async published(): Promise<void> {
    await this.bus?.repeated()
  }

  private usableRedis(): RedisClient | null {
    if (this.redis === null || this.redis.status !== 'ready' || Date.now() < this.redisSkipUntil) return null
    return this.redis
  }

  private redisFailed(err: unknown): void {
    this.options.metrics.redisErrors.inc()
    this.outage.failed('commands', err)
    this.redisSkipUntil = Date.now() + this.timings.redisBackoffMs
  }

  private evictLocal(keys: readonly string[]): void {
    this.epoch++
    // The change committed before this: an entry read from Postgres before now is stale.
    const now = Date.now()
    for (const key of keys) {
      this.local.delete(key)
      this.inflight.delete(key)
      this.invalidatedAt.set(key, now)
    }
    for (const listener of this.evictListeners) listener(keys)
  }

  /** Stops trusting every in-process entry (after the subscriber reconnected, or in tests). */
  clearLocal(): void {
    this.epoch++
    this.trustedFrom = Date.now()
    this.inflight.clear()
    for (const listener of this.evictListeners) listener(null)
  }

  /** Stops taking any Redis entry stored before now: each is read from Postgres again, once. */
  private distrustRedis(): void {
    this.redisTrustedFrom = Date.now()
  }

  /** For what a replica holds beside its cache (the signing keys): see evictListeners. */
  onEvict(listener: EvictionListener): void {
    this.evictListeners.push(listener)
  }

  /**
   * Call after the change has committed in Postgres: evicts here at once, then publishes on the
   * bus (cache/invalidation.ts), which deletes the Redis entries and tells the other replicas.
   */
  async invalidate(keys: readonly string[]): Promise<void> {
    if (keys.length === 0) return
    this.evictLocal(keys)
    await this.bus?.publish(keys)
  }

  /**
   * For readiness: 'ok' when Redis answers PING within the timeout, 'down' when it does not,
   * 'off' without REDIS_URL.
   */
  async ping(timeoutMs: number): Promise<'ok' | 'down' | 'off'> {
    return this.redis === null ? 'off' : pingWithin(this.redis, timeoutMs)
  }

  /** The Redis masters in use and the failovers seen (for readiness); null without Redis. */
  get redisMasters(): (RedisMasters & { topology: RedisTarget['topology'] }) | null {
    if (this.masterWatch === null || this.options.redis === undefined) return null
    return { topology: this.options.redis.topology, ...this.masterWatch.state }
  }

  async close(): Promise<void> {
    await this.stored()
    await this.bus?.close()
    this.redis?.disconnect()
  }

  /** The bus's subscriber connection, null without Redis (tests pause it to hold messages back). */
  get subscriber(): RedisClient | null {
    return this.bus?.subscriber ?? null
  }
}
