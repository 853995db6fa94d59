// The Redis tier's own commands: the connection the read path uses, the conditional store of a
// value read from Postgres (docs/internals.md, caches), and readiness's PING.
import { Command } from './ioredis.js'
import { openRedis, type RedisClient, type RedisTarget } from './redis-topology.js'
import { REDIS_COMMAND_TIMEOUT_MS, REDIS_CONNECTION } from './settings.js'

/**
 * Stores a fill's value, and when its Postgres read began, in Redis only if no invalidation bumped
 * the entry's generation meanwhile.
 */
const STORE_IF_UNCHANGED = `
local generation = redis.call('GET', KEYS[2]) or ''
if generation ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[3])
return 1`

export interface CommandClientEvents {
  failed(err: unknown): void
  down(): void
  ready(): void
}

/** The commands connection, which starts down: `ready` once it is, `down` whenever it closes. */
export function connectCommandClient(target: RedisTarget, events: CommandClientEvents): RedisClient {
  const redis = openRedis(target, {
    // A dead Redis must cost a request tens of milliseconds at most (docs/internals.md): no
    // queue to wait in while disconnected, no retries, and a short timeout on every command.
    ...REDIS_CONNECTION,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    commandTimeout: REDIS_COMMAND_TIMEOUT_MS,
  })
  redis.on('error', events.failed)
  events.down()
  redis.on('close', events.down)
  redis.on('ready', events.ready)
  return redis
}

/**
 * Sets `entry.key` to `json` and `entry.stampKey` to `readAt` for `ttlMs`, unless its generation
 * is no longer `generation`.
 */
export function storeIfUnchanged(
  redis: RedisClient,
  entry: { key: string; generationKey: string; stampKey: string },
  generation: string,
  value: { json: string; readAt: number },
  ttlMs: number,
): Promise<unknown> {
  const { key, generationKey, stampKey } = entry
  return redis.eval(STORE_IF_UNCHANGED, 3, key, generationKey, stampKey, generation, value.json, ttlMs, value.readAt)
}

/**
 * `command`'s answer, or a failure once `ms` have passed: a cluster client resends a command that
 * met a closed connection or a failover (after a pause each time), beyond any one connection's
 * command timeout, and no request may wait on Redis longer than this (docs/internals.md).
 */
export async function withinMs<T>(command: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`redis did not answer within ${ms} ms`)), ms)
  })
  try {
    return await Promise.race([command, late])
  } finally {
    clearTimeout(timer)
  }
}

/**
 * 'ok' when Redis answers PING within `timeoutMs`, else 'down' (for readiness). The PING has that
 * bound of its own: the connection's command timeout (50 ms, for the request path) would read a
 * loaded but healthy Redis as down. ioredis gives a command the connection's timeout only when it
 * has none yet (Command.setTimeout).
 */
export async function pingWithin(redis: RedisClient, timeoutMs: number): Promise<'ok' | 'down'> {
  if (redis.status !== 'ready') return 'down'
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<'down'>((resolve) => {
    timer = setTimeout(() => resolve('down'), timeoutMs)
  })
  const ping = new Command('ping', [])
  ping.setTimeout(timeoutMs)
  redis.sendCommand(ping)
  try {
    return await Promise.race([
      ping.promise.then(
        () => 'ok' as const,
        () => 'down' as const,
      ),
      timeout,
    ])
  } finally {
    clearTimeout(timer)
  }
}
