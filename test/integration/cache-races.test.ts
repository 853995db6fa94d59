// The Redis tier against a fill that races an invalidation (docs/internals.md): real Postgres
// and Redis, with the Postgres read held open so that the change lands between the read and the
// store.
import { createHash } from 'node:crypto'
import type { Redis } from 'ioredis'
import { pino } from 'pino'
import t from 'tap'
import { cacheKeys, TenancyCache, type CacheTimings } from '../../src/cache/index.js'
import { entryKey, generationKey } from '../../src/cache/entry-names.js'
import { DEFAULT_TIMINGS } from '../../src/cache/settings.js'
import { createMetrics, type Metrics } from '../../src/ops/metrics.js'
import { revokeKey } from '../../src/store/api-keys.js'
import type { TenancyLookups } from '../../src/shared/tenancy-records.js'
import { postgresLookups } from '../../src/store/tenancy-lookups.js'
import { freshDatabase } from '../helpers/db.js'
import { createParent, metricValue } from '../helpers/gateway.js'
import { startRedis } from '../helpers/own-redis.js'
import { sleep } from '../helpers/poll.js'
import { REDIS_URL, redisClient, redisPrefix, requireRedis } from '../helpers/redis.js'

await requireRedis()
const database = await freshDatabase(t)
const prefix = redisPrefix(t)
const redis = redisClient(t)

const silent = pino({ level: 'silent' })

function cache(
  source: TenancyLookups,
  options: { timings?: Partial<CacheTimings>; metrics?: Metrics } = {},
): TenancyCache {
  const made = new TenancyCache({
    source,
    redis: { topology: 'server', url: REDIS_URL },
    keyPrefix: prefix,
    // The repeat of each invalidation comes 200 ms later; the held fill outlasts it.
    timings: { reinvalidateAfterMs: 200, ...options.timings },
    log: silent,
    metrics: (options.metrics ?? createMetrics()).cache,
  })
  t.teardown(() => made.close())
  return made
}

/** Postgres lookups whose key reads wait, after reading, until `release()`. */
function heldLookups(): { lookups: TenancyLookups; read: Promise<void>; release: () => void } {
  const real = postgresLookups(database.sql)
  let markRead!: () => void
  let release!: () => void
  const read = new Promise<void>((resolve) => (markRead = resolve))
  const released = new Promise<void>((resolve) => (release = resolve))
  return {
    lookups: {
      ...real,
      async keyByDigest(keyDigest) {
        const record = await real.keyByDigest(keyDigest)
        markRead()
        await released
        return record
      },
    },
    read,
    release,
  }
}

async function ready(...caches: TenancyCache[]): Promise<void> {
  // Both connections up: a lookup before that would skip Redis.
  for (let i = 0; i < 100; i++) {
    if ((await Promise.all(caches.map((c) => c.ping(200)))).every((r) => r === 'ok')) return
    await sleep(20)
  }
  throw new Error('redis did not become ready')
}

const sha256 = (text: string) => createHash('sha256').update(text).digest()

/**
 * Fills the key's entry until a fill ran with Redis answering within its 50 ms deadline, and waits
 * for its store. On a loaded machine a command can pass that deadline: such a fill stores nothing
 * and Redis is skipped for a backoff, by design (docs/internals.md), so that fill proves nothing here.
 */
async function fillWithRedisAnswering(made: TenancyCache, metrics: Metrics, digest: Buffer): Promise<void> {
  const redisErrors = () => metricValue({ metrics }, 'tgw_redis_errors_total')
  for (let attempt = 0; attempt < 20; attempt++) {
    const errorsBefore = await redisErrors()
    made.clearLocal()
    await made.lookups.keyByDigest(digest)
    await made.stored()
    if ((await redisErrors()) === errorsBefore) return
    await sleep(DEFAULT_TIMINGS.redisBackoffMs + 50)
  }
  throw new Error('Redis did not answer one fill within its deadline in 20 tries')
}

t.test('a fill that read a key before its revocation does not put it back into Redis', async (t) => {
  const key = await createParent(database.sql, { name: 'race' })
  const entry = entryKey(prefix, cacheKeys.key(sha256(key.apiKey)))
  const held = heldLookups()
  const slow = cache(held.lookups)
  const other = cache(postgresLookups(database.sql))
  await ready(slow, other)

  // The slow replica reads the active key, and is held before it stores it. Its subscriber is
  // paused too, as a slow network would hold the message: a message that arrives before the store
  // stops the store anyway (the eviction epoch), so this is the case only Redis can settle.
  const subscriber = (slow as unknown as { subscriber: Redis }).subscriber
  const stream = (subscriber as unknown as { stream: { pause(): void; resume(): void } }).stream
  stream.pause()
  const filling = slow.lookups.keyByDigest(sha256(key.apiKey))
  await held.read
  // Meanwhile the key is revoked through the other replica: commit, then invalidate.
  await revokeKey(database.sql, key.id, key.keyId)
  await other.invalidate([cacheKeys.key(sha256(key.apiKey))])
  // The slow fill lands after the invalidation and after its repeat.
  await sleep(400)
  held.release()
  t.equal((await filling)?.status, 'active', 'the slow request itself saw the row it read')
  await sleep(100)
  stream.resume()

  t.equal(await redis.get(entry), null, 'Redis does not hold the old record')
  const fresh = cache(postgresLookups(database.sql))
  await ready(fresh)
  t.equal(
    (await fresh.lookups.keyByDigest(sha256(key.apiKey)))?.status,
    'revoked',
    'a replica with a cold cache sees the revocation',
  )
})

t.test('fills still store into Redis, before and after an invalidation', async (t) => {
  const key = await createParent(database.sql, { name: 'plain' })
  const entry = entryKey(prefix, cacheKeys.key(sha256(key.apiKey)))
  const metrics = createMetrics()
  const first = cache(postgresLookups(database.sql), { metrics })
  await ready(first)
  await fillWithRedisAnswering(first, metrics, sha256(key.apiKey))
  const stored = async () => JSON.parse((await redis.get(entry)) ?? 'null')?.status === 'active'
  t.ok(await stored(), 'stored after the first fill')

  const generation = async () => Number(await redis.get(generationKey(prefix, cacheKeys.key(sha256(key.apiKey)))))
  const generationBefore = await generation()
  await first.invalidate([cacheKeys.key(sha256(key.apiKey))])
  t.equal(await redis.get(entry), null, 'deleted by the invalidation')
  // Past the invalidation's repeat, which would delete what a fill stores before it (each bumps
  // the entry's generation).
  await first.published()
  t.equal(await generation(), generationBefore + 2, 'published() resolved once the repeat was sent')
  const secondMetrics = createMetrics()
  const second = cache(postgresLookups(database.sql), { metrics: secondMetrics })
  await ready(second)
  await fillWithRedisAnswering(second, secondMetrics, sha256(key.apiKey))
  t.ok(await stored(), 'stored again by a fill that began after the repeat, and kept')
})

t.test('an entry in use is refreshed in the background: once warm, no read waits for Redis or Postgres', async (t) => {
  // An in-process TTL of 1.5 s: records stay 1,200 ms (the TTL less the admission window, a fifth
  // of it), and the first read after 600 ms of that starts a refresh, which has 600 ms to land.
  const ttlMs = 1_500
  const key = await createParent(database.sql, { name: 'refreshed' })
  const metrics = createMetrics()
  const warm = cache(postgresLookups(database.sql), { timings: { localTtlMs: ttlMs }, metrics })
  await ready(warm)
  // Reads the in-process tier missed: each of them waited for Redis or Postgres. (The Redis tier's
  // misses are not counted: a background refresh that finds Redis empty adds one, and no read waits.)
  const localMisses = () => metricValue({ metrics }, 'tgw_cache_misses_total', { tier: 'local' })
  const digest = sha256(key.apiKey)
  t.equal((await warm.lookups.keyByDigest(digest))?.status, 'active', 'the first read fills the entry')
  const missesAfterWarming = await localMisses()

  // Reads every 40 ms for three TTLs: without the refresh, the entry would expire every 1,200 ms
  // and the read after that would wait for Redis.
  const until = Date.now() + 3 * ttlMs
  const statuses: (string | undefined)[] = []
  while (Date.now() < until) {
    statuses.push((await warm.lookups.keyByDigest(digest))?.status)
    await sleep(40)
  }
  const reads = statuses.length
  t.same(new Set(statuses), new Set(['active']), `each of the ${reads} reads found the active key`)
  const misses = (await localMisses()) - missesAfterWarming
  const refreshes = await metricValue({ metrics }, 'tgw_cache_refreshes_total')
  t.equal(misses, 0, `none of ${reads} reads missed the in-process cache`)
  t.ok(refreshes >= 3, `the entry was refreshed in the background ${refreshes} times`)
  t.ok(refreshes <= Math.ceil((3 * ttlMs) / 600) + 1, `at most once per refresh period (${refreshes})`)
})

t.test(
  'a refresh reads the stores: a change whose message was lost is seen within the TTL, as without it',
  async (t) => {
    const key = await createParent(database.sql, { name: 'silent' })
    const lossy = cache(postgresLookups(database.sql), { timings: { localTtlMs: 400 } })
    await ready(lossy)
    const digest = sha256(key.apiKey)
    t.equal((await lossy.lookups.keyByDigest(digest))?.status, 'active', 'warm')
    // Revoked in Postgres and deleted from Redis, but no message reaches the replica.
    await revokeKey(database.sql, key.id, key.keyId)
    await redis.del(entryKey(prefix, cacheKeys.key(digest)))
    const revokedAt = Date.now()
    let status: string | undefined = 'active'
    while (status === 'active' && Date.now() - revokedAt < 2_000) {
      status = (await lossy.lookups.keyByDigest(digest))?.status
      await sleep(20)
    }
    const took = Date.now() - revokedAt
    t.equal(status, 'revoked', `the replica sees the revocation (${took} ms)`)
    t.ok(took <= 400 + 200, `within the in-process TTL of 400 ms, give or take a lookup (${took} ms)`)
  },
)

t.test('a refresh that raced an invalidation does not store the row it read', async (t) => {
  const key = await createParent(database.sql, { name: 'raced' })
  const digest = sha256(key.apiKey)
  const entry = entryKey(prefix, cacheKeys.key(digest))
  // No repeat of the invalidation within the test: only the first message may evict the entry, so
  // that the refresh's own store is what the last read sees if the epoch did not stop it.
  const other = cache(postgresLookups(database.sql), { timings: { reinvalidateAfterMs: 60_000 } })
  const held = heldLookups()
  const slow = cache(held.lookups, { timings: { localTtlMs: 60_000, reinvalidateAfterMs: 60_000 } })
  await ready(other, slow)
  // The slow replica gets its entry from Redis (its own Postgres reads are held).
  await other.lookups.keyByDigest(digest)
  await sleep(100)
  t.match(JSON.parse((await redis.get(entry)) ?? 'null'), { status: 'active' }, 'in Redis')
  t.equal((await slow.lookups.keyByDigest(digest))?.status, 'active', 'the slow replica is warm, from Redis')

  // Past its refresh point (the TTL is long, so move the entry's clock instead of waiting), with
  // the Redis entry gone, the next read answers from memory and the refresh goes to Postgres.
  type Entry = { value: unknown; storedAt: number; refreshAt: number }
  // The in-process tier's LRU (cache/local-tier.ts).
  const local = (
    slow as unknown as {
      local: { local: { get(key: string): Entry | undefined; set(key: string, entry: Entry): void } }
    }
  ).local.local
  const stored = local.get(cacheKeys.key(digest))!
  local.set(cacheKeys.key(digest), { ...stored, refreshAt: 0 })
  await redis.del(entry)
  t.equal((await slow.lookups.keyByDigest(digest))?.status, 'active', 'answered from memory while the refresh runs')
  await held.read
  // The key is revoked through the other replica while the refresh holds the old row.
  await revokeKey(database.sql, key.id, key.keyId)
  await other.invalidate([cacheKeys.key(digest)])
  await sleep(100)
  held.release()
  await sleep(100)

  t.equal((await slow.lookups.keyByDigest(digest))?.status, 'revoked', 'the slow replica sees the revocation')
  t.not(JSON.parse((await redis.get(entry)) ?? 'null')?.status, 'active', 'Redis does not hold the old record')
})

t.test('more failed invalidations than remembered: every entry is deleted when Redis is back', async (t) => {
  // A redis-server of this test's own, so that pausing it disturbs no other test.
  const { url } = await startRedis(t)
  const admin = redisClient(t, { url })
  const keys = await Promise.all([1, 2, 3, 4, 5].map((n) => createParent(database.sql, { name: `k${n}` })))
  const entries = keys.map((key) => entryKey(prefix, cacheKeys.key(sha256(key.apiKey))))
  const replica = new TenancyCache({
    source: postgresLookups(database.sql),
    redis: { topology: 'server', url },
    keyPrefix: prefix,
    timings: { reinvalidateAfterMs: 60_000 },
    log: silent,
    metrics: createMetrics().cache,
    maxUnsentKeys: 2,
  })
  t.teardown(() => replica.close())
  await ready(replica)
  for (const key of keys) await replica.lookups.keyByDigest(sha256(key.apiKey))
  await replica.stored()
  t.equal(await admin.exists(...entries), 5, 'all five entries are in Redis')

  // Redis stops answering: each invalidation times out and is remembered, until there are too many.
  await admin.client('PAUSE', 2000, 'ALL')
  // Four of the five keys change; the replica can remember two names.
  for (const key of keys.slice(0, 4)) await replica.invalidate([cacheKeys.key(sha256(key.apiKey))])
  await admin.client('UNPAUSE')
  // The connection comes back (a new one, as after an outage).
  await admin.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes')
  let left = 5
  for (let i = 0; i < 100 && left > 0; i++) {
    await sleep(50)
    left = await admin.exists(...entries)
  }
  // Sending the two remembered names would leave three entries: all went, the unchanged one too.
  t.equal(left, 0, 'every entry under the prefix was deleted, the forgotten ones included')
})
