// /readyz against a Redis that is up but slow to answer (docs/operations.md: each store gets 800 ms):
// a test's own redis-server holds every client for a moment (CLIENT PAUSE), as a loaded machine
// does, and readiness still reads it as up. The request path's 50 ms command timeout is not the
// readiness check's.
import t from 'tap'
import { Redis } from 'ioredis'
import { metricValue, startGateway } from '../helpers/gateway.js'
import { startRedis } from '../helpers/own-redis.js'
import { until } from '../helpers/poll.js'

const redis = await startRedis(t)
const gw = await startGateway(t, { listen: false, redis: redis.url })
const admin = new Redis(redis.url, { lazyConnect: true })
t.teardown(() => admin.disconnect())
await admin.connect()

async function redisCheck(): Promise<string | undefined> {
  const response = await gw.app.inject({ method: 'GET', url: '/readyz' })
  return (response.json() as { checks?: { redis?: string } }).checks?.redis
}

t.test('a PING that waits a few hundred ms is a Redis that is up', async (t) => {
  t.ok(await until(10_000, async () => (await redisCheck()) === 'ok'), 'up once connected')
  // Every client's commands wait 500 ms, well within the check's 800 ms: the gateway's PING too.
  await admin.client('PAUSE', 500, 'ALL')
  t.equal(await redisCheck(), 'ok', 'a slow answer is an answer')
  t.equal(await metricValue(gw.app, 'tgw_redis_up', { connection: 'commands' }), 1, 'as the metric says')
})
