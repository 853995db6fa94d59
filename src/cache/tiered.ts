// The caches of DESIGN §8: a bounded in-process LRU with a short TTL, in front of Redis (longer
// TTL, shared by the replicas), in front of Postgres. A change commits in Postgres first, then
// deletes the Redis entries and publishes their names; every replica evicts them from its LRU.
import { LRUCache } from 'lru-cache'
import { Redis, type ChainableCommander } from 'ioredis'
import type { FastifyBaseLogger } from 'fastify'
import { ApiError } from '../errors.js'
import type { Metrics } from '../ops/metrics.js'
import type { KeyRecord, TenancyLookups, TenantRecord } from '../tenancy/lookups.js'

/** Names of cache entries; the same names are used in Redis (after the prefix) and on the bus. */
export const cacheKeys = {
  key: (keyDigest: Buffer) => `key:${keyDigest.toString('hex')}`,
  tenant: (tenantId: string) => `tenant:${tenantId}`,
  externalId: (parentId: string, externalId: string) => `ext:${parentId}:${externalId}`,
  // Renamed from active:<parent> (a count) when it became a boolean: replicas of the two versions
  // running side by side during a deploy never read each other's value.
  anyActive: (parentId: string) => `anyActive:${parentId}`,
}

/** What a change tells the caches once it has committed. */
export interface CacheInvalidator {
  invalidate(keys: readonly string[]): Promise<void>
}

export interface CacheTimings {
  /** In-process TTL of a found record: how long a lost invalidation can go unnoticed. */
  localTtlMs: number
  /** In-process and Redis TTL of "not found", so a flood of one unknown key stays off Postgres. */
  negativeTtlMs: number
  redisTtlMs: number
  /** While Postgres cannot answer, a record seen this recently is still used (DESIGN §8). */
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

const invalidationChannel = (keyPrefix: string) => `${keyPrefix}invalidate`

/**
 * Each entry has a generation in Redis, bumped by every invalidation of it. A fill reads the
 * generation with the entry, and stores what it read from Postgres only if the generation has not
 * moved since: otherwise an invalidation came in between, and the row it read may be the old one.
 * Without this, a fill that read the old row before a commit and wrote it to Redis after the
 * invalidation's delete would put a revoked key back for the whole Redis TTL.
 */
const generationKey = (keyPrefix: string, key: string) => `${keyPrefix}gen:${key}`
/** Longer than any fill can take (Postgres gives up after its 5 s connect timeout). */
const GENERATION_TTL_MS = 10 * 60_000

const STORE_IF_UNCHANGED = `
local generation = redis.call('GET', KEYS[2]) or ''
if generation ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1`

/** The Redis side of an invalidation, queued on a MULTI: bump generations, delete, publish. */
function queueInvalidation(multi: ChainableCommander, keyPrefix: string, keys: readonly string[]): ChainableCommander {
  for (const key of keys) {
    const generation = generationKey(keyPrefix, key)
    multi.incr(generation).pexpire(generation, GENERATION_TTL_MS)
  }
  return multi.del(...keys.map((key) => keyPrefix + key)).publish(invalidationChannel(keyPrefix), JSON.stringify(keys))
}

// What every connection of the gateway to Redis shares. ioredis 6 opens a RESP3 connection with
// HELLO, which a client without an offline queue fails to send at connect; RESP2 needs none.
const REDIS_CONNECTION = {
  protocol: 2,
  connectTimeout: 2_000,
  retryStrategy: (attempt: number) => Math.min(attempt * 200, 2_000),
} as const

/** A Redis command may take this long before the gateway gives up and asks Postgres. */
export const REDIS_COMMAND_TIMEOUT_MS = 50

export interface TenancyCacheOptions {
  /** Where misses go: Postgres. */
  source: TenancyLookups
  /** Unset: in-process cache only (one replica, DESIGN §2). */
  redisUrl?: string | undefined
  /** Prefix of every Redis key and of the invalidation channel, so deployments can share a Redis. */
  keyPrefix: string
  timings?: Partial<CacheTimings>
  log: FastifyBaseLogger
  metrics: Metrics
  /** How many failed invalidations are remembered for when Redis is back (default 10,000). */
  maxUnsentKeys?: number
}

const MAX_UNSENT_KEYS = 10_000

interface Entry {
  readonly value: unknown
  readonly storedAt: number
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
  private readonly redis: Redis | null
  private readonly subscriber: Redis | null
  private readonly prefix: string
  private readonly channel: string
  /** Bumped by every eviction: a fill that started before one must not store what it read. */
  private epoch = 0
  /** How long a proxied route may reuse an admission (tenancy/hook.ts): a fifth of the TTL, at most 1 s. */
  private readonly reuseWindowMs: number
  /**
   * The in-process TTL of a found record, shortened by that window, so that a reused admission
   * never outlives the configured TTL (DESIGN §8: a lost invalidation is bounded by it).
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
  /** Invalidations Redis did not take (it was down); sent again when it is back. */
  private readonly unsent = new Set<string>()
  /**
   * More invalidations failed than `unsent` keeps: their names are gone, so when Redis is back
   * every entry under the prefix is deleted instead.
   */
  private unsentOverflowed = false
  private resendTimer: NodeJS.Timeout | null = null
  private closed = false
  /** Repeats of invalidations, waiting for their moment. */
  private readonly repeats = new Map<NodeJS.Timeout, readonly string[]>()

  constructor(private readonly options: TenancyCacheOptions) {
    this.timings = { ...DEFAULT_TIMINGS, ...options.timings }
    this.prefix = options.keyPrefix
    this.channel = invalidationChannel(this.prefix)
    this.reuseWindowMs = Math.min(1_000, Math.floor(this.timings.localTtlMs / 5))
    this.foundTtlMs = this.timings.localTtlMs - this.reuseWindowMs
    this.refreshAfterMs = Math.floor(this.foundTtlMs / 2)
    this.local = new LRUCache<string, Entry>({
      max: this.timings.maxEntries,
      maxSize: this.timings.maxEstimatedBytes,
      sizeCalculation: estimatedBytes,
      ttl: this.foundTtlMs,
      // Expired entries stay (until the LRU pushes them out) for the stale window.
      noDeleteOnStaleGet: true,
    })
    this.redis = options.redisUrl === undefined ? null : this.connectCommands(options.redisUrl)
    this.subscriber = options.redisUrl === undefined ? null : this.connectSubscriber(options.redisUrl)
    this.lookups = this.cachedLookups(options.source)
  }

  private connectCommands(url: string): Redis {
    const redis = new Redis(url, {
      // A dead Redis must cost a request tens of milliseconds at most (DESIGN §8): no queue to
      // wait in while disconnected, no retries, and a short timeout on every command.
      ...REDIS_CONNECTION,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      commandTimeout: REDIS_COMMAND_TIMEOUT_MS,
    })
    redis.on('error', (err) => this.redisFailed(err))
    const up = this.options.metrics.redisUp.commands
    up.set(0)
    redis.on('close', () => up.set(0))
    redis.on('ready', () => {
      up.set(1)
      this.resendUnsent(redis)
    })
    return redis
  }

  private connectSubscriber(url: string): Redis {
    const subscriber = new Redis(url, {
      ...REDIS_CONNECTION,
      // Not on the request path: the subscription waits for the connection, however long.
      maxRetriesPerRequest: null,
    })
    // Its errors say nothing about the command connection: no backoff for lookups, a warning only.
    let lastWarning = 0
    subscriber.on('error', (err) => {
      const now = Date.now()
      if (now - lastWarning < this.timings.redisBackoffMs) return
      lastWarning = now
      this.options.log.warn({ err }, 'redis subscriber failed; reconnecting')
    })
    const up = this.options.metrics.redisUp.subscriber
    up.set(0)
    subscriber.on('close', () => up.set(0))
    // Reconnected: messages sent while it was away are lost, so forget everything local.
    subscriber.on('ready', () => {
      up.set(1)
      this.clearLocal()
    })
    subscriber.on('message', (channel: string, message: string) => {
      if (channel !== this.channel) return
      this.options.metrics.invalidationsReceived.inc()
      const keys = parseKeyList(message)
      if (keys === null) this.options.log.warn({ channel }, 'ignored a malformed cache invalidation')
      else this.evictLocal(keys)
    })
    subscriber.subscribe(this.channel).catch((err: unknown) => this.redisFailed(err))
    return subscriber
  }

  private cachedLookups(source: TenancyLookups): TenancyLookups {
    return {
      keyByDigest: (keyDigest) => this.read<KeyRecord>(cacheKeys.key(keyDigest), () => source.keyByDigest(keyDigest)),
      tenant: (id) => this.read<TenantRecord>(cacheKeys.tenant(id), () => source.tenant(id)),
      subAccountIdByExternalId: (parentId, externalId) =>
        this.read<string>(cacheKeys.externalId(parentId, externalId), () => source.subAccountIdByExternalId(parentId, externalId)),
      hasActiveSubAccounts: async (parentId) =>
        (await this.read<boolean>(cacheKeys.anyActive(parentId), () => source.hasActiveSubAccounts(parentId)))!,
      reuse: { version: () => this.epoch, windowMs: this.reuseWindowMs },
    }
  }

  /** The in-process entry, else one shared fill from Redis or Postgres per key at a time. */
  private read<T>(key: string, load: () => Promise<T | null>): Promise<T | null> {
    const entry = this.local.get(key, { allowStale: false })
    if (entry !== undefined && entry.storedAt > this.trustedFrom) {
      this.options.metrics.cacheHits.local.inc()
      if (Date.now() >= entry.refreshAt && !this.inflight.has(key)) this.refresh(key, load)
      return Promise.resolve(entry.value as T | null)
    }
    this.options.metrics.cacheMisses.local.inc()
    const pending = this.inflight.get(key)
    if (pending !== undefined) return pending as Promise<T | null>
    return this.startFill(key, load)
  }

  /** One fill of the entry at a time: later misses of it share this one until it settles. */
  private startFill<T>(key: string, load: () => Promise<T | null>): Promise<T | null> {
    const fill = this.fill(key, load).finally(() => {
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

  private async fill<T>(key: string, load: () => Promise<T | null>): Promise<T | null> {
    const epoch = this.epoch
    const redis = this.usableRedis()
    // null: Redis was not asked, so nothing is stored there either.
    let generation: string | null = null
    if (redis !== null) {
      try {
        const [raw, seenGeneration] = await redis.mget(this.prefix + key, generationKey(this.prefix, key))
        generation = seenGeneration ?? ''
        if (typeof raw === 'string') {
          this.options.metrics.storeLookups.redis.inc()
          this.options.metrics.cacheHits.redis.inc()
          const value = JSON.parse(raw) as T | null
          if (epoch === this.epoch) this.remember(key, value)
          return value
        }
      } catch (err) {
        this.redisFailed(err)
      }
    }
    this.options.metrics.cacheMisses.redis.inc()

    let value: T | null
    try {
      // Right after Postgres failed, do not make every lookup of a request wait for it again.
      if (Date.now() < this.postgresSkipUntil) throw new ApiError('store_unavailable', 'the store cannot be reached; try again')
      value = await load()
      this.options.metrics.storeLookups.postgres.inc()
    } catch (err) {
      if (!(err instanceof ApiError)) this.postgresSkipUntil = Date.now() + this.timings.postgresBackoffMs
      // Postgres cannot answer: a record seen within the stale window still serves; an unknown
      // key is never let through (the error becomes 503 store_unavailable).
      const stale = this.local.get(key, { allowStale: true })
      if (stale !== undefined && Date.now() - stale.storedAt < this.timings.staleWindowMs) return stale.value as T | null
      throw err
    }
    if (epoch === this.epoch) {
      this.remember(key, value)
      if (generation !== null) this.storeInRedis(key, value, generation)
    }
    return value
  }

  private remember(key: string, value: unknown): void {
    const now = Date.now()
    if (value === null) this.local.set(key, { value, storedAt: now, refreshAt: Infinity }, { ttl: this.timings.negativeTtlMs })
    else this.local.set(key, { value, storedAt: now, refreshAt: now + this.refreshAfterMs }, { ttl: this.foundTtlMs })
  }

  /** Stores a value read from Postgres, unless the entry was invalidated since `generation` was read. */
  private storeInRedis(key: string, value: unknown, generation: string): void {
    const redis = this.usableRedis()
    if (redis === null) return
    const ttl = value === null ? this.timings.negativeTtlMs : this.timings.redisTtlMs
    redis
      .eval(STORE_IF_UNCHANGED, 2, this.prefix + key, generationKey(this.prefix, key), generation, JSON.stringify(value), ttl)
      .catch((err: unknown) => this.redisFailed(err))
  }

  private usableRedis(): Redis | null {
    if (this.redis === null || this.redis.status !== 'ready' || Date.now() < this.redisSkipUntil) return null
    return this.redis
  }

  private redisFailed(err: unknown): void {
    this.options.metrics.redisErrors.inc()
    const now = Date.now()
    // One warning per backoff window, not one per request.
    if (now >= this.redisSkipUntil) this.options.log.warn({ err }, 'redis failed; using postgres until it answers again')
    this.redisSkipUntil = now + this.timings.redisBackoffMs
  }

  private evictLocal(keys: readonly string[]): void {
    this.epoch++
    for (const key of keys) {
      this.local.delete(key)
      this.inflight.delete(key)
    }
  }

  /** Stops trusting every in-process entry (after the subscriber reconnected, or in tests). */
  clearLocal(): void {
    this.epoch++
    this.trustedFrom = Date.now()
    this.inflight.clear()
  }

  /**
   * Call after the change has committed in Postgres. Evicts here at once, then deletes the Redis
   * entries and tells the other replicas; the same is sent once more a moment later, for a
   * replica that read the old row just before the commit and stored it just after the first
   * message. Redis being down does not fail the change: the message is kept and sent when it is
   * back, and the in-process TTL bounds how long other replicas can miss it.
   */
  async invalidate(keys: readonly string[]): Promise<void> {
    if (keys.length === 0) return
    this.evictLocal(keys)
    if (this.redis === null) return
    await this.broadcast(keys)
    const timer = setTimeout(() => {
      this.repeats.delete(timer)
      void this.broadcast(keys)
    }, this.timings.reinvalidateAfterMs)
    timer.unref()
    this.repeats.set(timer, keys)
  }

  private async broadcast(keys: readonly string[]): Promise<void> {
    if (this.redis === null) return
    try {
      if (this.redis.status !== 'ready') throw new Error('redis is not connected')
      await queueInvalidation(this.redis.multi(), this.prefix, keys).exec()
    } catch (err) {
      this.keepUnsent(keys)
      this.redisFailed(err)
      this.scheduleResend()
    }
  }

  /** Sends the invalidations Redis did not take (or, past the bound, deletes every entry). */
  private resendUnsent(redis: Redis): void {
    if (this.unsentOverflowed) {
      this.unsentOverflowed = false
      this.unsent.clear()
      void this.deleteAllEntries(redis)
      return
    }
    if (this.unsent.size === 0) return
    const keys = [...this.unsent]
    this.unsent.clear()
    void this.broadcast(keys)
  }

  /**
   * A command that timed out leaves the connection up, so no 'ready' follows to resend what it
   * did not send: try again once the backoff is over (and again, as long as it fails).
   */
  private scheduleResend(): void {
    if (this.resendTimer !== null || this.closed) return
    this.resendTimer = setTimeout(() => {
      this.resendTimer = null
      if (this.redis !== null && this.redis.status === 'ready') this.resendUnsent(this.redis)
    }, this.timings.redisBackoffMs)
    this.resendTimer.unref()
  }

  private keepUnsent(keys: readonly string[]): void {
    if (this.unsentOverflowed) return
    for (const key of keys) this.unsent.add(key)
    if (this.unsent.size <= (this.options.maxUnsentKeys ?? MAX_UNSENT_KEYS)) return
    this.unsent.clear()
    this.unsentOverflowed = true
    this.options.log.error({}, 'too many invalidations failed while Redis was down; every Redis entry will be deleted when it is back')
  }

  /**
   * Deletes every cache entry under the prefix (not the generations), a page at a time. Run when
   * Redis is back after more invalidations failed than could be remembered.
   */
  private async deleteAllEntries(redis: Redis): Promise<void> {
    let cursor = '0'
    let deleted = 0
    try {
      do {
        const [next, found] = await redis.scan(cursor, 'MATCH', `${this.prefix}*`, 'COUNT', 1000)
        cursor = next
        const entries = found.filter((name) => !name.startsWith(`${this.prefix}gen:`))
        if (entries.length > 0) deleted += await redis.del(...entries)
      } while (cursor !== '0')
      this.options.log.warn({ deleted }, 'deleted every Redis cache entry after lost invalidations')
    } catch (err) {
      // Tried again as long as it fails: the names of the stale entries are gone.
      this.unsentOverflowed = true
      this.redisFailed(err)
      this.scheduleResend()
    }
  }

  /**
   * For readiness: 'ok' when Redis answers PING within the timeout, 'down' when it does not,
   * 'off' without REDIS_URL.
   */
  async ping(timeoutMs: number): Promise<'ok' | 'down' | 'off'> {
    if (this.redis === null) return 'off'
    if (this.redis.status !== 'ready') return 'down'
    let timer: NodeJS.Timeout | undefined
    const timeout = new Promise<'down'>((resolve) => {
      timer = setTimeout(() => resolve('down'), timeoutMs)
    })
    try {
      return await Promise.race([this.redis.ping().then(() => 'ok' as const, () => 'down' as const), timeout])
    } finally {
      clearTimeout(timer)
    }
  }

  async close(): Promise<void> {
    this.closed = true
    if (this.resendTimer !== null) clearTimeout(this.resendTimer)
    // Repeats still due go out now: late is better than never for a racing fill.
    const due = [...this.repeats]
    this.repeats.clear()
    for (const [timer] of due) clearTimeout(timer)
    await Promise.all(due.map(([, keys]) => this.broadcast(keys)))
    this.redis?.disconnect()
    this.subscriber?.disconnect()
  }
}

/**
 * For a process without a cache of its own (the CLI): deletes the Redis entries and tells every
 * replica, as TenancyCache.invalidate does after a change made through the API.
 */
export async function publishInvalidation(
  redisUrl: string,
  keyPrefix: string,
  keys: readonly string[],
  options: { repeatAfterMs?: number } = {},
): Promise<void> {
  // One attempt: the CLI reports a failure rather than wait for Redis.
  const redis = new Redis(redisUrl, { ...REDIS_CONNECTION, maxRetriesPerRequest: 1, retryStrategy: () => null })
  redis.on('error', () => {
    // Reported by the command below.
  })
  const send = () => queueInvalidation(redis.multi(), keyPrefix, keys).exec()
  try {
    await send()
    // Sent again, as TenancyCache.invalidate does: a replica's fill that read the old row before
    // the commit may have written it back to Redis after the first delete.
    if (options.repeatAfterMs !== undefined) {
      await new Promise((resolve) => setTimeout(resolve, options.repeatAfterMs))
      await send()
    }
  } finally {
    redis.disconnect()
  }
}

function parseKeyList(message: string): string[] | null {
  try {
    const keys: unknown = JSON.parse(message)
    if (Array.isArray(keys) && keys.every((key) => typeof key === 'string')) return keys as string[]
  } catch {
    // Falls through: not JSON.
  }
  return null
}
