// The invalidation bus: how a committed change reaches every replica's caches. The change deletes
// the Redis entries (bumping their generations) and publishes their names on the channel; every
// replica's subscriber evicts them from its in-process LRU. A message Redis did not take is kept
// and sent when Redis is back, and every message is repeated once a moment later, for a fill that
// raced it (docs/internals.md, caches).
import { Cluster } from './ioredis.js'
import type { FastifyBaseLogger } from 'fastify'
import type { CacheMetrics } from './metrics.js'
import { entryKey, invalidationChannel } from './entry-names.js'
import { parseKeyList, sendInvalidation } from './invalidation-messages.js'
import { openRedis, type RedisClient, type RedisTarget } from './redis-topology.js'
import type { OutageNotice } from './outage-notice.js'
import { REDIS_CONNECTION, type CacheTimings } from './settings.js'

const MAX_UNSENT_KEYS = 10_000

export interface InvalidationBusOptions {
  redis: RedisTarget
  keyPrefix: string
  /** The cache's command connection: invalidations are sent on it. */
  commands: RedisClient
  timings: CacheTimings
  log: FastifyBaseLogger
  metrics: CacheMetrics
  /** How many failed invalidations are remembered for when Redis is back (default 10,000). */
  maxUnsentKeys?: number | undefined
  /** A message named these entries: evict them from the in-process cache. */
  evict(keys: readonly string[]): void
  /** The subscriber (re)connected: messages sent while it was away are lost. */
  distrustLocal(): void
  /** A command failed or timed out: the cache backs off Redis for a moment. */
  redisFailed(err: unknown): void
  /** Where the subscriber's failures and returns are said (shared with the commands connection). */
  outage: OutageNotice
}

export class InvalidationBus {
  /** Its own connection: a subscribed connection can issue no other command. */
  readonly subscriber: RedisClient
  private readonly channel: string
  /** Invalidations Redis did not take (it was down); sent again when it is back. */
  private readonly unsent = new Set<string>()
  /**
   * More invalidations failed than `unsent` keeps: their names are gone, so when Redis is back
   * every entry under the prefix is deleted instead.
   */
  private unsentOverflowed = false
  private resendTimer: NodeJS.Timeout | null = null
  private closed = false
  /** Repeats of invalidations waiting for their moment, each with what sends it now. */
  private readonly repeats = new Map<NodeJS.Timeout, () => Promise<void>>()
  /** Each repeat published, until it has been sent (or failed and was kept for later). */
  private readonly repeatsUnderWay = new Set<Promise<void>>()

  private readonly options: InvalidationBusOptions
  constructor(options: InvalidationBusOptions) {
    this.options = options
    this.channel = invalidationChannel(options.keyPrefix)
    this.subscriber = this.subscribe(options.redis)
  }

  /**
   * ioredis subscribes again on every reconnection: to the new master after a Sentinel failover,
   * to another node when a cluster's subscriber node goes away.
   */
  private subscribe(target: RedisTarget): RedisClient {
    const subscriber = openRedis(target, {
      ...REDIS_CONNECTION,
      // Not on the request path: the subscription waits for the connection, however long.
      maxRetriesPerRequest: null,
    })
    // Its errors say nothing about the command connection: no backoff for lookups, the log only.
    subscriber.on('error', (err) => this.options.outage.failed('subscriber', err))
    const up = this.options.metrics.redisUp.subscriber
    up.set(0)
    subscriber.on('close', () => up.set(0))
    // Reconnected: messages sent while it was away are lost, so forget everything local.
    subscriber.on('ready', () => {
      up.set(1)
      this.options.outage.recovered('subscriber')
      this.options.distrustLocal()
    })
    // A cluster client moves its subscription to another node when its node leaves, and says
    // nothing of it but that a node left: messages may have been missed all the same.
    if (subscriber instanceof Cluster) subscriber.on('-node', () => this.options.distrustLocal())
    subscriber.on('message', (channel: string, message: string) => {
      if (channel !== this.channel) return
      this.options.metrics.invalidationsReceived.inc()
      const keys = parseKeyList(message)
      if (keys === null) this.options.log.warn({ channel }, 'ignored a malformed cache invalidation')
      else {
        this.options.evict(keys)
        this.deleteTaggedEntries(keys)
      }
    })
    subscriber.subscribe(this.channel).catch((err: unknown) => this.options.redisFailed(err))
    return subscriber
  }

  /**
   * A replica of the earlier version deletes only the names it knows (entry-names.ts): whoever sent
   * the message, the entries under this version's names go too, or this replica would read them
   * back from Redis for up to its TTL. One DEL per name and replica, on a single server only (the
   * earlier version ran on no cluster); the sender repeats its message a second later, for a fill
   * that raced this. To go in the release after this one
   * (docs/decisions/0235-key-names-changed-once.md).
   */
  private deleteTaggedEntries(keys: readonly string[]): void {
    const redis = this.options.commands
    if (redis instanceof Cluster || redis.status !== 'ready') return
    const names = keys.map((key) => entryKey(this.options.keyPrefix, key))
    redis.del(...names).catch((err: unknown) => this.options.redisFailed(err))
  }

  /**
   * Deletes the Redis entries and tells the other replicas; the same is sent once more a moment
   * later, for a replica that read the old row just before the commit and stored it just after
   * the first message. Redis being down does not fail the change: the message is kept and sent
   * when it is back, and the in-process TTL bounds how long other replicas can miss it.
   */
  async publish(keys: readonly string[]): Promise<void> {
    await this.broadcast(keys)
    let sent = () => {}
    const repeat = new Promise<void>((resolve) => {
      sent = resolve
    })
    const sendNow = () => this.broadcast(keys).then(sent)
    const timer = setTimeout(() => {
      this.repeats.delete(timer)
      void sendNow()
    }, this.options.timings.reinvalidateAfterMs)
    timer.unref()
    this.repeats.set(timer, sendNow)
    this.repeatsUnderWay.add(repeat)
    void repeat.then(() => this.repeatsUnderWay.delete(repeat))
  }

  /** Resolves once every repeat published so far has been sent (or kept for when Redis is back). */
  async repeated(): Promise<void> {
    await Promise.all(this.repeatsUnderWay)
  }

  private async broadcast(keys: readonly string[]): Promise<void> {
    const redis = this.options.commands
    try {
      if (redis.status !== 'ready') throw new Error('redis is not connected')
      await sendInvalidation(redis, this.options.keyPrefix, keys)
    } catch (err) {
      this.keepUnsent(keys)
      this.options.redisFailed(err)
      this.scheduleResend()
    }
  }

  /** Sends the invalidations Redis did not take (or, past the bound, deletes every entry). */
  resendUnsent(): void {
    if (this.unsentOverflowed) {
      this.unsentOverflowed = false
      this.unsent.clear()
      void this.deleteAllEntries()
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
      if (this.options.commands.status === 'ready') this.resendUnsent()
    }, this.options.timings.redisBackoffMs)
    this.resendTimer.unref()
  }

  private keepUnsent(keys: readonly string[]): void {
    if (this.unsentOverflowed) return
    for (const key of keys) this.unsent.add(key)
    if (this.unsent.size <= (this.options.maxUnsentKeys ?? MAX_UNSENT_KEYS)) return
    this.unsent.clear()
    this.unsentOverflowed = true
    this.options.log.error(
      {},
      'too many invalidations failed while Redis was down; every Redis entry will be deleted when it is back',
    )
  }

  /**
   * Deletes every cache entry under the prefix (not the generations), a page at a time. Run when
   * Redis is back after more invalidations failed than could be remembered.
   */
  private async deleteAllEntries(): Promise<void> {
    const redis = this.options.commands
    const prefix = this.options.keyPrefix
    let deleted = 0
    try {
      // A cluster's keys are spread over its masters: each is scanned on its own.
      for (const node of redis instanceof Cluster ? redis.nodes('master') : [redis]) {
        let cursor = '0'
        do {
          const [next, found] = await node.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000)
          cursor = next
          const entries = found.filter((name) => !name.startsWith(`${prefix}gen:`))
          // One DEL per key: on a cluster, a DEL of several keys must keep to one slot.
          const counts = await Promise.all(entries.map((entry) => node.del(entry)))
          deleted += counts.reduce((sum, count) => sum + count, 0)
        } while (cursor !== '0')
      }
      this.options.log.warn({ deleted }, 'deleted every Redis cache entry after lost invalidations')
    } catch (err) {
      // Tried again as long as it fails: the names of the stale entries are gone.
      this.unsentOverflowed = true
      this.options.redisFailed(err)
      this.scheduleResend()
    }
  }

  /** Sends the repeats still due (late is better than never for a racing fill), then unsubscribes. */
  async close(): Promise<void> {
    this.closed = true
    if (this.resendTimer !== null) clearTimeout(this.resendTimer)
    const due = [...this.repeats]
    this.repeats.clear()
    for (const [timer] of due) clearTimeout(timer)
    await Promise.all(due.map(([, sendNow]) => sendNow()))
    this.subscriber.disconnect()
  }
}
