// Redis down (docs/internals.md; outages: docs/operations.md): a redis-server of the test's
// own, killed (SIGKILL, a crash) or shut down (`shutdown nosave`), then started again, empty, on
// the same port. Two instances A and B share it and one Postgres database.
// Requirements: keys already in the in-process cache keep working without Redis or Postgres;
// the rest fall back to Postgres; no request waits more than 100 ms on Redis; changes still
// work; and once Redis is back a revoke made on one instance reaches the other within 1 s.
//
// The time a request waits on Redis is measured inside the gateway (ioredis's diagnostics
// channel, see redis-waits.ts); latencies seen by a client are compared, request for request and
// interleaved, with a gateway that has no Redis at all.
import t, { type Test } from 'tap'
import { generateApiKey } from '../../src/auth/key-format.js'
import { freshDatabase } from '../helpers/db.js'
import { createParent, metricValue, startGateway, type TestGateway } from '../helpers/gateway.js'
import { eventually, sleep } from '../helpers/poll.js'
import { redisClient } from '../helpers/redis.js'
import { startUpstream } from '../helpers/upstream.js'
import { median, round } from './measuring.js'
import { startRedis } from '../helpers/own-redis.js'
import { BUS_BOUND_MS, REDIS_WAIT_BOUND_MS, parents, storeLookups, subWithKey } from './redis-faults.js'
import { measureRedisWaits } from './redis-waits.js'
import { codeOf, describeTimed, timedCall, type Timed } from './timed-call.js'

const LIMIT_MS = 5_000

const db = await freshDatabase(t)
const sql = db.sql
const upstream = await startUpstream(t)
const redis = await startRedis(t)
const prefix = 'tgw_faults_down:'
const channel = `${prefix}invalidate`

// Found and "not found" records stay in-process for a minute and each invalidation is sent once:
// only the bus (or a reconnect, which clears the in-process cache) can change an answer quickly.
const timings = { localTtlMs: 60_000, negativeTtlMs: 60_000, reinvalidateAfterMs: 60_000 }
// Two replicas sharing a database and a Redis prefix, and one without Redis to compare with.
const replica = { database: db, pool: {}, upstreamUrl: upstream.url, cacheTimings: timings }
const a = await startGateway(t, { ...replica, redis: redis.url, redisKeyPrefix: prefix })
const b = await startGateway(t, { ...replica, redis: redis.url, redisKeyPrefix: prefix })
const baseline = await startGateway(t, { ...replica, redis: false })
const waits = measureRedisWaits(a.app)

/**
 * A client of the test's own Redis, for NUMSUB; it reconnects after each restart by itself. Its
 * errors are expected while the server is down: the calls below fail and are retried.
 */
const admin = redisClient(t, { url: redis.url, retryStrategy: () => 100 })

async function subscribers(count: number, ms = 15_000): Promise<boolean> {
  const took = await eventually(
    ms,
    async () => {
      try {
        const reply = (await admin.pubsub('NUMSUB', channel)) as [string, number | string]
        return Number(reply[1]) === count
      } catch {
        return false
      }
    },
    20,
  )
  return took !== null
}

const redisUp = (gw: TestGateway, connection: 'commands' | 'subscriber') =>
  metricValue(gw.app, 'tgw_redis_up', { connection })
const until = async (ms: number, check: () => Promise<boolean>) => (await eventually(ms, check, 20)) !== null

const revoke = (gw: TestGateway, s: { parentKey: string; subId: string; keyId: string }) =>
  timedCall(
    gw.url,
    s.parentKey,
    { method: 'POST', path: `/v1/sub-accounts/${s.subId}/api-keys/${s.keyId}/revoke`, acting: 'self' },
    LIMIT_MS,
  )

/** Polls `gw` with `apiKey` until it is refused as revoked; the time it took, or null after `ms`. */
async function refusedWithin(
  gw: TestGateway,
  apiKey: string,
  ms: number,
): Promise<{ took: number | null; last: Timed | null }> {
  let last: Timed | null = null
  const took = await eventually(
    ms,
    async () => {
      last = await timedCall(gw.url, apiKey, { path: '/orders' }, LIMIT_MS)
      return last.res?.status === 401 && codeOf(last.res) === 'unauthenticated'
    },
    20,
  )
  return { took, last }
}

const measured: string[] = []

/** A revoke through A must reach B within 1 s. */
async function busWorks(t: Test, what: string): Promise<void> {
  const s = await subWithKey(sql)
  for (let i = 0; i < 2; i++) {
    const warm = await timedCall(b.url, s.apiKey, { path: '/orders' }, LIMIT_MS)
    t.equal(warm.res?.status, 200, `${what}: B accepts the key (${describeTimed(warm)})`)
  }
  const revoked = await revoke(a, s)
  t.equal(revoked.res?.status, 200, `${what}: revoked through A (${describeTimed(revoked)})`)
  const { took, last } = await refusedWithin(b, s.apiKey, BUS_BOUND_MS)
  t.not(
    took,
    null,
    `${what}: B refuses the revoked key within ${BUS_BOUND_MS} ms (last: ${last === null ? 'none' : describeTimed(last)})`,
  )
  measured.push(`${what}: a revoke through A reached B in ${took} ms`)
}

// (Assertions go in subtests: tap ends a file whose top level waits after its last assertion.)
t.test('before the fault, the bus works', async (t) => {
  t.ok(await subscribers(2), 'A and B are subscribed to the invalidation channel')
  t.ok(await until(10_000, async () => (await redisUp(a, 'commands')) === 1), "A's command connection is ready")
  await busWorks(t, 'before')
})

async function outage(t: Test, how: 'SIGKILL' | 'shutdown nosave'): Promise<void> {
  const [warm] = await parents(sql, 1)
  const fresh = await parents(sql, 10)
  const freshBaseline = await parents(sql, 10)
  const pending = await subWithKey(sql)
  for (let i = 0; i < 2; i++) {
    t.equal(
      (await timedCall(a.url, warm!.apiKey, { path: '/orders' }, LIMIT_MS)).res?.status,
      200,
      'A: a key warmed in-process',
    )
    t.equal(
      (await timedCall(b.url, pending.apiKey, { path: '/orders' }, LIMIT_MS)).res?.status,
      200,
      'B: a key warmed in-process',
    )
  }

  const errorsBefore = await metricValue(a.app, 'tgw_redis_errors_total')
  if (how === 'SIGKILL') await redis.kill()
  else await redis.shutdown()
  const downAt = Date.now()
  t.notOk(redis.running(), `redis-server is gone (${how})`)
  t.ok(
    await until(5_000, async () => (await redisUp(a, 'commands')) === 0 && (await redisUp(a, 'subscriber')) === 0),
    'A sees both its Redis connections down (tgw_redis_up 0)',
  )
  const before = await storeLookups(a)

  await t.test('a key in the in-process cache: served, neither Redis nor Postgres asked', async (t) => {
    const start = await storeLookups(a)
    const res = await timedCall(a.url, warm!.apiKey, { path: '/orders' }, LIMIT_MS)
    t.equal(res.res?.status, 200, describeTimed(res))
    const end = await storeLookups(a)
    t.same(
      { postgres: end.postgres - start.postgres, redis: end.redis - start.redis },
      { postgres: 0, redis: 0 },
      'no lookup left the process',
    )
    t.equal(waits.get(res.requestId)?.commands, 0, 'no Redis command')
  })

  await t.test('keys A has not seen: served from Postgres, without waiting on Redis', async (t) => {
    const rows: { down: Timed; base: Timed; waitMs: number }[] = []
    for (let i = 0; i < fresh.length; i++) {
      const base = await timedCall(baseline.url, freshBaseline[i]!.apiKey, { path: '/orders' }, LIMIT_MS)
      const down = await timedCall(a.url, fresh[i]!.apiKey, { path: '/orders' }, LIMIT_MS)
      rows.push({ down, base, waitMs: waits.get(down.requestId)?.ms ?? NaN })
    }
    t.same(
      rows.filter((r) => r.down.res?.status !== 200).map((r) => describeTimed(r.down)),
      [],
      `all ${rows.length} served`,
    )
    const end = await storeLookups(a)
    t.ok(
      end.postgres - before.postgres >= 2 * fresh.length,
      `from Postgres (${end.postgres - before.postgres} lookups; each key and its tenant)`,
    )
    t.equal(end.redis - before.redis, 0, 'none from Redis')
    // A connection that is down is skipped, not tried: no command fails, so the error counter
    // need not move; the outage shows as tgw_redis_up 0 and as Redis misses.
    t.ok(
      end.redisMisses - before.redisMisses >= 2 * fresh.length,
      `the metrics show the fallback: ${end.redisMisses - before.redisMisses} Redis misses (errors +${end.errors - errorsBefore})`,
    )
    const maxWait = Math.max(...rows.map((r) => r.waitMs))
    t.ok(
      maxWait <= REDIS_WAIT_BOUND_MS,
      `no request waited more than ${REDIS_WAIT_BOUND_MS} ms on Redis (max ${round(maxWait)} ms: a dead connection is not asked at all)`,
    )
    const extra = rows.map((r) => r.down.ms - r.base.ms)
    t.ok(
      median(extra) <= REDIS_WAIT_BOUND_MS,
      `median extra latency over a gateway without Redis: ${round(median(extra))} ms`,
    )
    measured.push(
      `${how}: unseen keys served from Postgres in median ${round(median(rows.map((r) => r.down.ms)))} ms vs ${round(median(rows.map((r) => r.base.ms)))} ms without Redis ` +
        `(extra median ${round(median(extra))} ms, max ${round(Math.max(...extra))} ms); Redis wait max ${round(maxWait)} ms`,
    )
  })

  await t.test('an unknown key is still refused; changes still work', async (t) => {
    const unknown = await timedCall(a.url, generateApiKey().apiKey, { path: '/orders' }, LIMIT_MS)
    t.ok(
      unknown.res?.status === 401 && codeOf(unknown.res) === 'unauthenticated',
      `an unknown key: 401 (${describeTimed(unknown)})`,
    )
    const parent = await createParent(sql, { name: 'changes' })
    const created = await timedCall(
      a.url,
      parent.apiKey,
      { method: 'POST', path: '/v1/sub-accounts', acting: 'self', json: { name: 'while redis is down' } },
      LIMIT_MS,
    )
    t.equal(created.res?.status, 201, `a sub-account is created (${describeTimed(created)})`)
    // A revoke while Redis is down: A refuses at once; B cannot hear of it until Redis is back.
    const revoked = await revoke(a, pending)
    t.equal(revoked.res?.status, 200, `a key is revoked through A (${describeTimed(revoked)})`)
    const onA = await timedCall(a.url, pending.apiKey, { path: '/orders' }, LIMIT_MS)
    t.ok(onA.res?.status === 401, `A refuses it at once (${describeTimed(onA)})`)
  })

  await sleep(Math.max(0, 1_500 - (Date.now() - downAt)))
  await redis.start()
  const upAt = Date.now()

  await t.test('Redis is back: both instances reconnect, and the revoke made meanwhile reaches B', async (t) => {
    t.ok(await subscribers(2), 'A and B subscribe again')
    t.ok(
      await until(15_000, async () => (await redisUp(a, 'commands')) === 1 && (await redisUp(b, 'commands')) === 1),
      'and their command connections are ready',
    )
    const reconnected = Date.now() - upAt
    const { took, last } = await refusedWithin(b, pending.apiKey, BUS_BOUND_MS)
    t.not(
      took,
      null,
      `B refuses the key revoked during the outage (last: ${last === null ? 'none' : describeTimed(last)})`,
    )
    measured.push(
      `${how}: outage ${upAt - downAt} ms; reconnected ${reconnected} ms after the restart; the revoke made during the outage was refused by B ${took} ms later`,
    )
  })

  await t.test('and the bus works again', (t) => busWorks(t, `after ${how}`))
}

t.test('Redis killed (SIGKILL)', (t) => outage(t, 'SIGKILL'))
t.test('Redis shut down (shutdown nosave)', (t) => outage(t, 'shutdown nosave'))

t.test('measured', async (t) => {
  for (const line of measured) t.comment(line)
  t.pass('reported')
})
