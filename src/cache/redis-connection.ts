// Whether the Redis that REDIS_URL names will serve this gateway, asked once at start
// (docs/operations.md): a server that refuses it (a database it does not have, such as `/99`, a
// wrong or missing password) is a startup error naming the variable. ioredis would log the refusal
// and carry on, on database 0 or unauthenticated, and /readyz would say ok. A server that does not
// answer is not an error: the gateway starts degraded, as it runs through any Redis outage.
import { Redis, ReplyError as ReplyErrorClass } from 'ioredis'

// ioredis declares it `any`; it is redis-errors' class of the server's error replies.
const ReplyError = ReplyErrorClass as new (...args: never[]) => Error

/** The server answered and refused: the gateway must not start on it. */
export class RedisRefused extends Error {
  constructor(url: string, reason: string) {
    super(`REDIS_URL (${describeRedisUrl(url)}) was refused by the server: ${reason}; fix REDIS_URL or the server`)
    this.name = 'RedisRefused'
  }
}

/** Host, port and database of a Redis URL, never its user or password. */
export function describeRedisUrl(url: string): string {
  const parsed = new URL(url)
  const database = parsed.pathname.length > 1 ? parsed.pathname.slice(1) : '0'
  return `${parsed.protocol}//${parsed.hostname || 'localhost'}:${parsed.port || '6379'}/${database}`
}

/**
 * Connects as the gateway's clients will (AUTH, SELECT), then PINGs. Resolves 'reachable', or
 * 'unreachable' when no answer came within `timeoutMs`; rejects with RedisRefused when the server
 * refused the password or the database.
 */
export async function checkRedisAtStart(url: string, timeoutMs = 2_000): Promise<'reachable' | 'unreachable'> {
  const redis = new Redis(url, {
    lazyConnect: true,
    enableReadyCheck: false,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: timeoutMs,
  })
  // ioredis reports a refused AUTH or SELECT here, and only "Connection is closed" to connect().
  let refusal: Error | null = null
  redis.on('error', (err: unknown) => {
    if (err instanceof ReplyError) refusal ??= err
  })
  try {
    try {
      await redis.connect()
      await redis.ping()
      // ioredis sent SELECT already, but a refused one only reached the error listener.
      await redis.select(Number(new URL(url).pathname.slice(1) || '0'))
    } catch (err) {
      const reason = refusal ?? (err instanceof ReplyError ? err : null)
      if (reason !== null) throw new RedisRefused(url, reason.message)
      return 'unreachable'
    }
    return 'reachable'
  } finally {
    redis.disconnect()
  }
}
