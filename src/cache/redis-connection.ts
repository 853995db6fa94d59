// Whether the Redis that REDIS_URL (or REDIS_SENTINELS, or REDIS_CLUSTER_NODES) names will serve
// this gateway, asked once at start (docs/operations.md): a server that refuses it (a database it
// does not have, such as `/99`, a wrong or missing password) is a startup error naming the
// variable. ioredis would log the refusal and carry on, on database 0 or unauthenticated, and
// /readyz would say ok. A server that does not answer is not an error: the gateway starts
// degraded, as it runs through any Redis outage.
import { Cluster, ReplyError as ReplyErrorClass } from 'ioredis'
import { databaseOf, describeRedisTarget, openRedis, type RedisTarget, variableOf } from './redis-topology.js'

// ioredis declares it `any`; it is redis-errors' class of the server's error replies.
const ReplyError = ReplyErrorClass as new (...args: never[]) => Error

/** The server answered and refused: the gateway must not start on it. */
export class RedisRefused extends Error {
  constructor(target: RedisTarget, reason: string) {
    const variable = variableOf(target)
    const fix = variable === 'REDIS_URL' ? 'REDIS_URL' : `${variable} or REDIS_URL (its credentials)`
    super(`${variable} (${describeRedisTarget(target)}) was refused by the server: ${reason}; fix ${fix} or the server`)
    this.name = 'RedisRefused'
  }
}

/**
 * Connects as the gateway's clients will (AUTH, SELECT), then PINGs. Resolves 'reachable', or
 * 'unreachable' when no answer came within `timeoutMs`; rejects with RedisRefused when the server
 * refused the password or the database.
 */
export async function checkRedisAtStart(target: RedisTarget, timeoutMs = 2_000): Promise<'reachable' | 'unreachable'> {
  const redis = openRedis(target, {
    lazyConnect: true,
    enableReadyCheck: false,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: timeoutMs,
  })
  // ioredis reports a refused AUTH or SELECT here, and only "Connection is closed" to connect().
  let refusal: Error | null = null
  const keep = (err: unknown) => {
    if (err instanceof ReplyError) refusal ??= err
  }
  redis.on('error', keep)
  redis.on('node error', keep)
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error('no answer')), timeoutMs * 2)
  })
  try {
    try {
      await Promise.race([
        (async () => {
          await redis.connect()
          await redis.ping()
          // ioredis sent SELECT already, but a refused one only reached the error listener.
          if (!(redis instanceof Cluster)) await redis.select(databaseOf(target))
        })(),
        late,
      ])
    } catch (err) {
      const reason = refusal ?? (err instanceof ReplyError ? err : null)
      if (reason !== null) throw new RedisRefused(target, reason.message)
      return 'unreachable'
    }
    return 'reachable'
  } finally {
    clearTimeout(timer)
    redis.disconnect()
  }
}
