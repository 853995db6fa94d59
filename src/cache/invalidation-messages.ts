// The messages of the invalidation bus (cache/invalidation.ts): what a committed change sends to
// Redis (the entries deleted, their generations bumped, their names published), how a replica
// reads a message back, and the one-off sender of a process without a cache (the CLI).
import { Cluster } from './ioredis.js'
import {
  entryKey,
  generationKey,
  GENERATION_TTL_MS,
  invalidationChannel,
  legacyEntryKey,
  legacyGenerationKey,
  stampKey,
} from './entry-names.js'
import { openRedis, type RedisClient, type RedisTarget } from './redis-topology.js'
import { REDIS_CONNECTION } from './settings.js'

/** What a change tells the caches once it has committed. */
export interface CacheInvalidator {
  invalidate(keys: readonly string[]): Promise<void>
}

/**
 * The Redis side of an invalidation of many names on one server, a few hundred in one script. KEYS,
 * five a name: its generation, entry and stamp, then the legacy generation and entry (the names
 * replicas of the earlier version use during a rolling upgrade); ARGV[1]: the generations' TTL.
 */
const INVALIDATE_MANY = `
for i = 1, #KEYS, 5 do
  redis.call('INCR', KEYS[i])
  redis.call('PEXPIRE', KEYS[i], ARGV[1])
  redis.call('DEL', KEYS[i + 1], KEYS[i + 2])
  redis.call('INCR', KEYS[i + 3])
  redis.call('PEXPIRE', KEYS[i + 3], ARGV[1])
  redis.call('DEL', KEYS[i + 4])
end
return 0`

/**
 * Names a script takes at once: 500 names are 2,500 keys, a few milliseconds of Redis's time; a
 * MULTI a name instead cost the sender a key import's time over again (bench:key-import).
 */
export const INVALIDATE_MANY_NAMES = 500

/**
 * The Redis side of an invalidation: each entry's generation bumped and the entry deleted, then
 * the names published. On a cluster, in one MULTI per entry (the two share a hash tag, so one slot,
 * where a MULTI may not span slots); on one server, by one script for each INVALIDATE_MANY_NAMES
 * names, atomic as each MULTI was. Publishing after every delete has answered: a replica that
 * hears the message and reads Redis again finds the entry gone. Nothing needs the entries deleted
 * together: a fill stores only under the generation it read (redis-commands.ts).
 */
export async function sendInvalidation(redis: RedisClient, keyPrefix: string, keys: readonly string[]): Promise<void> {
  if (redis instanceof Cluster) await Promise.all(keys.map((key) => invalidateOne(redis, keyPrefix, key)))
  else
    for (let from = 0; from < keys.length; from += INVALIDATE_MANY_NAMES) {
      const names = keys
        .slice(from, from + INVALIDATE_MANY_NAMES)
        .flatMap((key) => [
          generationKey(keyPrefix, key),
          entryKey(keyPrefix, key),
          stampKey(keyPrefix, key),
          legacyGenerationKey(keyPrefix, key),
          legacyEntryKey(keyPrefix, key),
        ])
      await redis.eval(INVALIDATE_MANY, names.length, ...names, GENERATION_TTL_MS)
    }
  // On a cluster, PUBLISH reaches the subscribers of every node
  // (docs/decisions/0232-plain-publish-subscribe-on-a-cluster-not-sharded.md).
  await redis.publish(invalidationChannel(keyPrefix), JSON.stringify(keys))
}

/** One name's invalidation on a cluster: its generation bumped and its entry deleted, in one slot. */
function invalidateOne(redis: Cluster, keyPrefix: string, key: string): Promise<unknown> {
  const generation = generationKey(keyPrefix, key)
  return redis
    .multi()
    .incr(generation)
    .pexpire(generation, GENERATION_TTL_MS)
    .del(entryKey(keyPrefix, key), stampKey(keyPrefix, key))
    .exec()
}

/**
 * For a process without a cache of its own (the CLI): deletes the Redis entries and tells every
 * replica, as TenancyCache.invalidate does after a change made through the API.
 */
export async function publishInvalidation(
  target: RedisTarget,
  keyPrefix: string,
  keys: readonly string[],
  options: { repeatAfterMs?: number } = {},
): Promise<void> {
  // One attempt: the CLI reports a failure rather than wait for Redis.
  const redis = openRedis(target, { ...REDIS_CONNECTION, maxRetriesPerRequest: 1, retryStrategy: () => null })
  redis.on('error', () => {
    // Reported by the command below.
  })
  const send = () => sendInvalidation(redis, keyPrefix, keys)
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

/** The names a message carries; null for a malformed one. */
export function parseKeyList(message: string): string[] | null {
  try {
    const keys: unknown = JSON.parse(message)
    if (Array.isArray(keys) && keys.every((key) => typeof key === 'string')) return keys as string[]
  } catch {
    // Falls through: not JSON.
  }
  return null
}
