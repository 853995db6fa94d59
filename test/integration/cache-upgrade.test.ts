// A rolling upgrade from the version whose Redis names had no hash tags
// (docs/decisions/0235-key-names-changed-once.md): replicas of both versions share one Redis and
// one channel, and a change made through either must reach the other's Redis entries, not only its
// in-process cache.
import { pino } from 'pino'
import t from 'tap'
import { cacheKeys, TenancyCache } from '../../src/cache/index.js'
import { entryKey, legacyEntryKey, legacyGenerationKey } from '../../src/cache/entry-names.js'
import { createMetrics } from '../../src/ops/metrics.js'
import { postgresLookups } from '../../src/store/tenancy-lookups.js'
import { freshDatabase } from '../helpers/db.js'
import { eventually } from '../helpers/poll.js'
import { REDIS_URL, redisClient, redisPrefix, requireRedis, untilSubscribed } from '../helpers/redis.js'

await requireRedis()
const database = await freshDatabase(t)
const prefix = redisPrefix(t)
const redis = redisClient(t)

const replica = new TenancyCache({
  source: postgresLookups(database.sql),
  redis: { topology: 'server', url: REDIS_URL },
  keyPrefix: prefix,
  log: pino({ level: 'silent' }),
  metrics: createMetrics().cache,
})
t.teardown(() => replica.close())
await untilSubscribed(redis, prefix, 1)

t.test("a change made here deletes the earlier version's entry and bumps its generation", async (t) => {
  const name = cacheKeys.keyById('a1b2c3d4-0000-4000-8000-000000000001')
  await redis.set(legacyEntryKey(prefix, name), '{"revoked":false}', 'PX', 60_000)
  await redis.set(legacyGenerationKey(prefix, name), '7', 'PX', 60_000)
  await replica.invalidate([name])
  t.equal(await redis.get(legacyEntryKey(prefix, name)), null, 'the earlier name is gone: its replicas read Postgres')
  t.equal(await redis.get(legacyGenerationKey(prefix, name)), '8', 'and a fill of theirs that raced it stores nothing')
})

t.test("a change announced by a replica of the earlier version deletes this version's entry", async (t) => {
  const name = cacheKeys.tenant('a1b2c3d4-0000-4000-8000-000000000002')
  await redis.set(entryKey(prefix, name), '{"status":"active"}', 'PX', 60_000)
  // What the earlier version sends: its own names deleted, the names published.
  await redis
    .multi()
    .del(legacyEntryKey(prefix, name))
    .publish(`${prefix}invalidate`, JSON.stringify([name]))
    .exec()
  const gone = await eventually(1_000, async () => (await redis.get(entryKey(prefix, name))) === null, 10)
  t.ok(gone !== null, `this version's entry was deleted on the message (${gone} ms)`)
})
