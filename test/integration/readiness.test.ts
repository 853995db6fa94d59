// /readyz across store outages (docs/operations.md), against the real Postgres and Redis through
// TCP relays the test cuts: 503 until the gateway has reached Postgres once since it started and
// while it drains; in between, an outage of Postgres or Redis is reported in the body and in the
// metrics but keeps the answer 200, so that one outage does not take every replica out of the
// Service at once.
import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { buildApp } from '../../src/app.js'
import { loadConfig } from '../../src/config.js'
import { openStore } from '../../src/store/db.js'
import { postgresAddress, startRelay, viaPort } from '../faults/relay.js'
import { embeddedDataDir, freshDatabase } from '../helpers/db.js'
import { TEST_ENCRYPTION_KEY } from '../helpers/encryption-key.js'
import { metricValue, startGateway } from '../helpers/gateway.js'
import { eventually } from '../helpers/poll.js'
import { problemOf } from '../helpers/problems.js'
import { REDIS_URL } from '../helpers/redis.js'

interface Readyz {
  status: number
  body: {
    status?: string
    code?: string
    detail?: string
    draining?: boolean
    checks?: { postgres?: string; redis?: string }
  }
}

/** The body without its `redis` member (the masters in use: ops.test.ts checks it). */
function withoutMasters(body: Readyz['body']): Readyz['body'] {
  const { redis: _masters, ...rest } = body as Readyz['body'] & { redis?: unknown }
  return rest
}

async function readyz(app: FastifyInstance): Promise<Readyz> {
  const response = await app.inject({ method: 'GET', url: '/readyz' })
  return { status: response.statusCode, body: response.json() }
}

const db = await freshDatabase(t)
const postgresRelay = await startRelay(t, postgresAddress())
const redisTarget = new URL(REDIS_URL)
const redisRelay = await startRelay(t, { host: redisTarget.hostname, port: Number(redisTarget.port || 6379) })
const relayedRedis = new URL(REDIS_URL)
relayedRedis.hostname = '127.0.0.1'
relayedRedis.port = String(redisRelay.port)

// Postgres is out before the gateway has ever reached it.
await postgresRelay.cut()
const gw = await startGateway(t, {
  listen: false,
  database: db,
  pool: { url: viaPort(db.url, postgresRelay.port) },
  redis: relayedRedis.toString(),
  redisKeyPrefix: `tgw_readiness_${process.pid}:`,
  usageFlushIntervalMs: 3_600_000,
  relays: [postgresRelay, redisRelay],
})
const app = gw.app

t.test('503 until Postgres has been reached once since the start', async (t) => {
  const response = await app.inject({ method: 'GET', url: '/readyz' })
  t.equal(response.statusCode, 503, 'not ready: this replica could not authenticate a single unknown key')
  const body = problemOf(response)
  t.equal(body.code, 'not_ready')
  t.match(body.detail, /^postgres cannot be reached .*has not been since the gateway started/)
  t.equal((body.checks as { postgres?: string }).postgres, 'down', 'the body names Postgres')
})

t.test('200 once Postgres answered, with both stores up', async (t) => {
  await postgresRelay.restore()
  const ready = await eventually(
    10_000,
    async () => {
      const r = await readyz(app)
      return r.status === 200 && r.body.checks?.redis === 'ok'
    },
    50,
  )
  t.not(ready, null, 'ready once Postgres answered and Redis connected')
  t.same(withoutMasters((await readyz(app)).body), { status: 'ready', checks: { postgres: 'ok', redis: 'ok' } })
  t.ok(
    (await metricValue(app, 'tgw_postgres_connections', { state: 'active' })) > 0,
    'the pool metric sees its connections',
  )
})

t.test('a Postgres outage after the first contact: still 200, reported in the body and the metrics', async (t) => {
  await postgresRelay.cut()
  const during = await readyz(app)
  t.equal(during.status, 200, 'still in the Service')
  t.same(
    withoutMasters(during.body),
    { status: 'ready', checks: { postgres: 'down', redis: 'ok' } },
    'the body names the outage',
  )
  t.equal(
    await metricValue(app, 'tgw_postgres_connections', { state: 'active' }),
    0,
    'tgw_postgres_connections reports none',
  )
  await postgresRelay.restore()
  t.not(
    await eventually(30_000, async () => (await readyz(app)).body.checks?.postgres === 'ok', 100),
    null,
    'checks say ok again once it is back',
  )
})

t.test('a Redis outage: still 200, reported in the body and in tgw_redis_up', async (t) => {
  await redisRelay.cut()
  const during = await eventually(5_000, async () => (await readyz(app)).body.checks?.redis === 'down', 50)
  t.not(during, null, 'the body names Redis')
  const answer = await readyz(app)
  t.equal(answer.status, 200, 'still in the Service')
  t.same(withoutMasters(answer.body), { status: 'ready', checks: { postgres: 'ok', redis: 'down' } })
  t.equal(await metricValue(app, 'tgw_redis_up', { connection: 'commands' }), 0, 'tgw_redis_up says so')
  await redisRelay.restore()
  t.not(
    await eventually(30_000, async () => (await readyz(app)).body.checks?.redis === 'ok', 100),
    null,
    'and ok again once it is back',
  )
})

t.test('both stores out at once: still 200', async (t) => {
  await Promise.all([postgresRelay.cut(), redisRelay.cut()])
  const named = await eventually(
    5_000,
    async () => {
      const { body } = await readyz(app)
      return body.checks?.postgres === 'down' && body.checks.redis === 'down'
    },
    50,
  )
  t.not(named, null, 'the body names both')
  t.equal((await readyz(app)).status, 200, 'still in the Service')
  await Promise.all([postgresRelay.restore(), redisRelay.restore()])
})

t.test('503 while draining, stores up or not', async (t) => {
  app.readiness.draining = true
  const draining = await readyz(app)
  t.equal(draining.status, 503)
  t.equal(draining.body.code, 'not_ready')
  t.equal(draining.body.draining, true)
  t.match(draining.body.detail, /shutting down/)
})

t.test('the embedded database (no DATABASE_URL) is reached like a real one', async (t) => {
  const store = await openStore({ databaseUrl: undefined, dataDir: embeddedDataDir(t) })
  const config = loadConfig({ ENCRYPTION_KEY: TEST_ENCRYPTION_KEY })
  const embedded = await buildApp({ config, store, logger: false })
  t.teardown(async () => {
    await embedded.close()
    await store.close()
  })
  const answer = await readyz(embedded)
  t.equal(answer.status, 200)
  t.same(answer.body, { status: 'ready', checks: { postgres: 'ok', redis: 'off' } })
})
