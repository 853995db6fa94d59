// A revoked key stays refused on every replica, whatever Redis gives back (docs/internals.md,
// caches): the loss of a cluster master (or a Sentinel failover) can promote a replica that never
// got the invalidation's delete, and so hand the revoked key's old entry back to the replicas. The
// promotion is forced here deterministically, 20 times: the entry's keys in Redis (the entry, its
// generation, anything else under its hash tag) are saved before the revoke and restored after
// both replicas refused the key, which is what a promoted replica holds. Then each replica must go
// on refusing it through its background refreshes, and after a reconnected subscriber's distrust.
import { createHash, randomUUID } from 'node:crypto'
import { pino } from 'pino'
import t from 'tap'
import { cacheKeys, TenancyCache } from '../../src/cache/index.js'
import { createMetrics } from '../../src/ops/metrics.js'
import { postgresLookups } from '../../src/store/tenancy-lookups.js'
import { metricValue, startReplicas, type TestGateway } from '../helpers/gateway.js'
import { until } from '../helpers/poll.js'
import { REDIS_URL, redisClient } from '../helpers/redis.js'
import { startUpstream } from '../helpers/upstream.js'

const RUNS = 20
/** Short, so that each run sees its refreshes soon: found entries refresh after 600 ms. */
const LOCAL_TTL_MS = 1_500

const upstream = await startUpstream(t)
const replicas = (await startReplicas(t, 2, {
  listen: false,
  gatewayConfig: { routes: [{ prefix: '/v1/things', upstream: upstream.url }] },
  // The repeat of each invalidation (which deletes the entry again) comes soon: the old entry is
  // given back after it.
  cacheTimings: { localTtlMs: LOCAL_TTL_MS, reinvalidateAfterMs: 100 },
})) as [TestGateway, TestGateway]
const [first] = replicas
const prefix = first.redisKeyPrefix!
const redis = redisClient(t)
const parent = await first.createParent()

const manage = (method: string, path: string, body?: unknown) =>
  first.call(parent.apiKey, { method, url: `/v1/sub-accounts${path}`, acting: 'self', body })

async function freshKey(run: number): Promise<{ id: string; sub: string; apiKey: string }> {
  const sub = await manage('POST', '', { name: `stays-revoked-${run}` })
  if (sub.statusCode !== 201) throw new Error(`create: ${sub.statusCode} ${sub.body}`)
  const subId = sub.json().id as string
  const key = await manage('POST', `/${subId}/api-keys`, { name: 'k', scopes: ['things:read'] })
  if (key.statusCode !== 201) throw new Error(`mint: ${key.statusCode} ${key.body}`)
  const body = key.json() as { id: string; api_key: string }
  return { id: body.id, sub: subId, apiKey: body.api_key }
}

/** Every Redis key under the entry's hash tag, with its value and time to live. */
async function snapshot(tag: string): Promise<{ name: string; dump: Buffer; ttl: number }[]> {
  const names = await redis.keys(`${prefix}*{${tag}}`)
  return Promise.all(
    names.map(async (name) => ({
      name,
      dump: (await redis.dumpBuffer(name))!,
      ttl: Math.max(0, await redis.pttl(name)),
    })),
  )
}

const refreshes = (gw: TestGateway) => metricValue(gw.app, 'tgw_cache_refreshes_total')
const stale = (gw: TestGateway) => metricValue(gw.app, 'tgw_cache_redis_stale_total')

for (let run = 1; run <= RUNS; run++) {
  t.test(`run ${run} of ${RUNS}: the old entry given back by Redis is not taken`, async (t) => {
    const key = await freshKey(run)
    const digest = createHash('sha256').update(key.apiKey).digest()
    const tag = cacheKeys.key(digest)
    const statuses: number[][] = [[], []]
    const read = async (i: number) => {
      const status = (await replicas[i]!.call(key.apiKey, { method: 'GET', url: '/v1/things/x' })).statusCode
      statuses[i]!.push(status)
      return status
    }
    for (const i of [0, 1]) t.equal(await read(i), 200, `replica ${i} accepts the key before`)
    // The key's creation invalidated its entries, and repeats that: both done (each bumps the
    // generation), or the repeat would delete the old entry once given back. The fill's store into
    // Redis follows its answer, and a Redis skipped for a moment (a command past its 50 ms on a busy
    // machine) stores nothing: a refresh stores it then.
    const generation = async () => Number((await redis.get(`${prefix}gen:{${tag}}`)) ?? 0)
    t.ok(
      await until(10_000, async () => {
        if ((await generation()) >= 2 && (await redis.exists(`${prefix}{${tag}}`)) === 1) return true
        await Promise.all([read(0), read(1)])
        return false
      }),
      'its entry is in Redis',
    )
    const saved = await snapshot(tag)
    const generationBefore = await generation()

    const revoke = await manage('POST', `/${key.sub}/api-keys/${key.id}/revoke`)
    t.equal(revoke.statusCode, 200, 'revoked')
    // The invalidation and its repeat have both deleted the entry (each bumps its generation).
    t.ok(await until(5_000, async () => (await generation()) >= generationBefore + 2), 'the invalidation was repeated')
    t.ok(await until(5_000, async () => (await read(0)) === 401 && (await read(1)) === 401), 'both replicas refuse it')

    // Every store into Redis begun so far has landed: one begun before the revoke holds the old
    // generation, which the restore brings back, and would replace the old entry if it came later.
    await Promise.all(replicas.map((gw) => gw.app.tenancyCache.stored()))
    // The promoted replica: the entry as it was before the revoke. (A refresh already under way
    // may read it first: counted from here.)
    const staleBefore = await Promise.all(replicas.map(stale))
    for (const { name, dump, ttl } of saved) await redis.restore(name, ttl, dump, 'REPLACE')
    // Half the runs also drop their trust in every in-process entry, as a replica whose subscriber
    // reconnected after the failover does: its next read of the key goes to Redis at once.
    if (run % 2 === 0) for (const gw of replicas) gw.app.tenancyCache.clearLocal()
    // Until a replica has read the old entry: on the code before the fix, it took it (and the key
    // was accepted again); now it passes it over (and Postgres's answer replaces it in Redis). A
    // busy machine can hold Redis's answer past its 50 ms, and the read then skips Redis for a
    // second: it comes to the entry later.
    const acceptedAgain = () => statuses.some((answers) => answers.slice(answers.indexOf(401)).includes(200))
    t.ok(
      await until(30_000, async () => {
        await Promise.all([read(0), read(1)])
        if (acceptedAgain()) return true
        const now = await Promise.all(replicas.map(stale))
        return now.some((count, i) => count > staleBefore[i]!)
      }),
      'a replica read the old entry Redis gave back',
    )
    // And a while longer: two more refreshes on each replica.
    const before = await Promise.all(replicas.map(refreshes))
    t.ok(
      await until(10_000, async () => {
        await Promise.all([read(0), read(1)])
        const now = await Promise.all(replicas.map(refreshes))
        return now.every((count, i) => count >= before[i]! + 2)
      }),
      'each replica refreshed its entries twice since',
    )
    for (const i of [0, 1]) {
      const firstRefusal = statuses[i]!.indexOf(401)
      const after = statuses[i]!.slice(firstRefusal)
      t.ok(
        after.every((status) => status === 401),
        `replica ${i} never accepted the key after refusing it (${after.length} answers: ${[...new Set(after)].join(', ')})`,
      )
    }
  })
}

t.test('an entry stamped before what a replica knows is passed over, however it knows it', async (t) => {
  const keyPrefix = `${prefix}direct:`
  const metrics = createMetrics()
  // Room for two invalidations remembered: a third forgets the oldest, which then holds for all.
  const cache = new TenancyCache({
    source: postgresLookups(first.sql),
    redis: { topology: 'server', url: REDIS_URL },
    keyPrefix,
    timings: { maxEntries: 2 },
    log: pino({ level: 'silent' }),
    metrics: metrics.cache,
  })
  t.teardown(() => cache.close())
  t.ok(await until(10_000, async () => (await cache.ping(800)) === 'ok'), 'connected')
  const staleCount = () => metricValue({ metrics }, 'tgw_cache_redis_stale_total')
  // Tenants that exist nowhere: an entry Redis holds for one is taken only if it is trusted, and
  // Postgres answers "not found" otherwise.
  const ghost = (name: string) => ({ id: randomUUID(), name })
  const plant = async (id: string, stampedAt: number) => {
    const name = cacheKeys.tenant(id)
    const record = { id, parentId: null, externalId: null, status: 'active', limits: null }
    await redis.set(`${keyPrefix}{${name}}`, JSON.stringify(record), 'PX', 60_000)
    await redis.set(`${keyPrefix}at:{${name}}`, String(stampedAt), 'PX', 60_000)
  }

  const trusted = ghost('trusted')
  await plant(trusted.id, Date.now() - 10_000)
  t.equal((await cache.lookups.tenant(trusted.id))?.id, trusted.id, 'an entry nothing here contradicts is taken')

  // Three invalidations, of names other than the ones asked below: the first is forgotten for room.
  const forgottenAt = Date.now()
  for (const name of ['a', 'b', 'c']) await cache.invalidate([cacheKeys.tenant(`${forgottenAt}-${name}`)])
  const older = ghost('older')
  await plant(older.id, forgottenAt - 1)
  const before = await staleCount()
  t.equal(await cache.lookups.tenant(older.id), null, 'stamped before a forgotten invalidation: Postgres answers')
  t.equal(await staleCount(), before + 1, 'counted as stale')
})
