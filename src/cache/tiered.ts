// The tiered read path of the tenancy lookups (docs/internals.md, caches): a bounded
// in-process LRU with a short TTL (local-tier.ts), in front of Redis (longer TTL, shared by the
// replicas: redis-tier.ts), in front of Postgres; one fill per entry at a time, and the backoffs.
// Changes reach it through the invalidation bus (cache/invalidation.ts).
import { ApiError } from '../errors.js'
import type { RequestTrace } from '../shared/request-trace.js'
import type { KeyRecord, PlanRecord, TenancyLookups, TenantRecord } from '../shared/tenancy-records.js'
import { InvalidationBus } from './invalidation.js'
import type { CacheInvalidator } from './invalidation-messages.js'
import { cacheKeys, type EvictionListener } from './entry-names.js'
import { LocalTier } from './local-tier.js'
import { MasterWatch, type RedisMasters } from './redis-masters.js'
import { RedisTier } from './redis-tier.js'
import type { RedisClient, RedisTarget } from './redis-topology.js'
import { DEFAULT_TIMINGS, type CacheTimings, type TenancyCacheOptions } from './settings.js'

export class TenancyCache implements CacheInvalidator {
  readonly lookups: TenancyLookups
  private readonly timings: CacheTimings
  /** The in-process LRU (local-tier.ts). */
  private readonly local: LocalTier
  private readonly inflight = new Map<string, Promise<unknown>>()
  /** Redis (redis-tier.ts); null without REDIS_URL. */
  private readonly redis: RedisTier | null
  private readonly bus: InvalidationBus | null
  private readonly masterWatch: MasterWatch | null
  /** Bumped by every eviction: a fill that started before one must not store what it read. */
  private epoch = 0
  /** After a Postgres lookup failed (or missed its deadline), lookups skip Postgres until then. */
  private postgresSkipUntil = 0
  /** Told of every name invalidated here or over the bus, and null when messages may have been lost. */
  private readonly evictListeners: EvictionListener[] = []

  private readonly options: TenancyCacheOptions
  constructor(options: TenancyCacheOptions) {
    this.options = options
    this.timings = { ...DEFAULT_TIMINGS, ...options.timings }
    this.local = new LocalTier(this.timings)
    const target = options.redis
    this.redis =
      target === undefined
        ? null
        : new RedisTier({
            target,
            keyPrefix: options.keyPrefix,
            timings: this.timings,
            log: options.log,
            metrics: options.metrics,
            ready: () => this.bus?.resendUnsent(),
          })
    const redis = this.redis
    // A new master may lack the deletes the old one took (a replica promoted before they reached
    // it): what Redis holds from before is read from Postgres again, as after a restart.
    this.masterWatch = redis === null ? null : new MasterWatch(redis.commands, options.metrics, () => redis.distrust())
    this.bus =
      target === undefined || redis === null
        ? null
        : new InvalidationBus({
            redis: target,
            keyPrefix: options.keyPrefix,
            commands: redis.commands,
            timings: this.timings,
            log: options.log,
            metrics: options.metrics,
            maxUnsentKeys: options.maxUnsentKeys,
            evict: (keys) => this.evictLocal(keys),
            distrustLocal: () => this.clearLocal(),
            redisFailed: (err) => redis.failed(err),
            outage: redis.outage,
          })
    this.lookups = this.cachedLookups(options.source)
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
      reuse: { version: () => this.epoch, windowMs: this.local.reuseWindowMs },
      traced: trace === null ? (requestTrace) => this.cachedLookups(source, requestTrace) : undefined,
    }
  }

  /** The in-process entry, else one shared fill from Redis or Postgres per key at a time. */
  private read<T>(key: string, load: () => Promise<T | null>, trace: RequestTrace | null = null): Promise<T | null> {
    const entry = this.local.trusted(key)
    if (entry !== undefined) {
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
    // generation null: Redis was not asked, so nothing is stored there either.
    let generation: string | null = null
    if (this.redis !== null) {
      const fromRedis = await this.redis.read<T>(key, () => this.local.heldAsOf(key), trace)
      if (fromRedis.found) {
        if (epoch === this.epoch) this.local.remember(key, fromRedis.value, fromRedis.stampedAt)
        return fromRedis.value
      }
      generation = fromRedis.generation
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
      const stale = this.local.withinStaleWindow(key)
      if (stale !== undefined) return stale.value as T | null
      throw err
    }
    if (epoch === this.epoch) {
      this.local.remember(key, value, readAt)
      if (generation !== null) this.redis?.store(key, value, generation, readAt)
    }
    return value
  }

  /** Resolves once every store into Redis begun so far has ended (stored, or failed). */
  async stored(): Promise<void> {
    await this.redis?.stored()
  }

  /** Resolves once the repeats of every invalidation published here so far have been sent. */
  async published(): Promise<void> {
    await this.bus?.repeated()
  }

  private evictLocal(keys: readonly string[]): void {
    this.epoch++
    // The change committed before this: an entry read from Postgres before now is stale.
    const now = Date.now()
    for (const key of keys) {
      this.local.delete(key)
      this.inflight.delete(key)
      this.redis?.invalidated(key, now)
    }
    for (const listener of this.evictListeners) listener(keys)
  }

  /** Stops trusting every in-process entry (after the subscriber reconnected, or in tests). */
  clearLocal(): void {
    this.epoch++
    this.local.distrust()
    this.inflight.clear()
    for (const listener of this.evictListeners) listener(null)
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
    return this.redis === null ? 'off' : this.redis.ping(timeoutMs)
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
