// The machine's Redis, as the tests use it: TEST_REDIS_URL names it, each test file keeps to a key
// prefix of its own, and every client a test opens has an error listener and is closed at teardown.
import { randomBytes } from 'node:crypto'
import { Redis, type RedisOptions } from 'ioredis'
import { stopTheRun, type TestLike } from './test-like.js'

/** The server tests use; override with TEST_REDIS_URL. */
export const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379'

/** The URL without its password, for messages. */
function shown(url: string): string {
  const parsed = new URL(url)
  if (parsed.password !== '') parsed.password = '***'
  return parsed.toString()
}

let reachable: Promise<void> | undefined

/**
 * Resolves once the tests' Redis answered a PING; otherwise rejects, once per test process, with
 * a message that names TEST_REDIS_URL instead of a connection error per test.
 */
export function requireRedis(): Promise<void> {
  reachable ??= (async () => {
    const probe = new Redis(REDIS_URL, {
      lazyConnect: true,
      connectTimeout: 5_000,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    })
    // Every failure reaches the catch below through connect() or ping(); the event says why.
    let cause: Error | null = null
    probe.on('error', (err: Error) => (cause ??= err))
    try {
      await probe.connect()
      await probe.ping()
    } catch (err) {
      const why = (cause ?? (err as Error)).message
      const error = new Error(
        `the tests' Redis at ${shown(REDIS_URL)} cannot be reached (${why}): start it, or set TEST_REDIS_URL to one that answers`,
      )
      throw stopTheRun(error)
    } finally {
      probe.disconnect()
    }
  })()
  return reachable
}

export interface TestRedis extends Redis {
  /** The last connection error the client reported (it keeps reconnecting meanwhile). */
  lastError(): Error | null
}

/**
 * A client of the test's own on `url` (the tests' Redis by default), disconnected at teardown.
 * Its connection errors are kept, not printed by ioredis as unhandled: a test whose Redis goes away
 * on purpose sees the failure in the commands it sends, which reject as before.
 */
export function redisClient(t: TestLike, options: RedisOptions & { url?: string } = {}): TestRedis {
  const { url = REDIS_URL, ...rest } = options
  const client = new Redis(url, { maxRetriesPerRequest: 1, ...rest }) as TestRedis
  let last: Error | null = null
  client.on('error', (err: Error) => (last = err))
  client.lastError = () => last
  t.teardown(() => client.disconnect())
  return client
}

/** A Redis prefix of its own per test file, whose keys are deleted afterwards. */
export function redisPrefix(t: TestLike): string {
  const prefix = `tgw_test_${randomBytes(6).toString('hex')}:`
  t.teardown(async () => {
    const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 })
    redis.on('error', () => {})
    try {
      const keys = await redis.keys(`${prefix}*`)
      // A few thousand at a time: a key import leaves hundreds of thousands (their generations).
      for (let from = 0; from < keys.length; from += 5_000) await redis.del(...keys.slice(from, from + 5_000))
    } finally {
      redis.disconnect()
    }
  })
  return prefix
}

/**
 * Waits (up to 5 s) until `count` replicas listen on the invalidation channel of `keyPrefix`: a
 * change published before a replica subscribed would be lost to it. Throws when they never do.
 */
export async function untilSubscribed(redis: Redis, keyPrefix: string, count: number): Promise<void> {
  const deadline = Date.now() + 5_000
  for (;;) {
    const [, listening] = (await redis.pubsub('NUMSUB', `${keyPrefix}invalidate`)) as [string, number | string]
    if (Number(listening) === count) return
    if (Date.now() > deadline)
      throw new Error(`${listening} of ${count} replicas listen on ${keyPrefix}invalidate after 5 s`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}
