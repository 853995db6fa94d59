// Prepaid credits are durable (docs/api.md, Credits): Postgres holds what the usage meter burned,
// so a replica started later, embedded (no Redis) or one whose Redis lost the credits' keys,
// enforces the balance from it, never from a fresh count. Real Postgres, Redis and upstream.
import t from 'tap'
import { metricValue, startGateway, type TestGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { until } from '../helpers/poll.js'
import { UNHURRIED_LIMITS } from '../helpers/limits.js'
import { checkProblem } from '../helpers/problems.js'
import { redisClient } from '../helpers/redis.js'
import { reportsTokens, startUpstream } from '../helpers/upstream.js'

const HOUR = 3_600_000
const upstream = await startUpstream(t, reportsTokens)
const routes = [{ prefix: '/llm', upstream: upstream.url, meters: [{ name: 'tokens', header: 'x-tokens-used' }] }]

async function setUp(gw: TestGateway) {
  const parent = await gw.createParent({ name: 'P' })
  const created = await callAs(gw.url, parent.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts',
    acting: 'self',
    json: { name: 'credits', limits: { credits: { tokens: { required: true } } } },
  })
  const sub = (created.json() as { id: string }).id
  const granted = await callAs(gw.url, parent.apiKey, {
    method: 'POST',
    path: `/v1/sub-accounts/${sub}/credits/grants`,
    acting: 'self',
    json: { meter: 'tokens', units: 100 },
  })
  if (granted.status !== 201) throw new Error(`grant: ${granted.status} ${granted.body}`)
  return { parent, sub }
}

const accounted = new Map<TestGateway, number>()
async function send(gw: TestGateway, key: string, sub: string, tokens: number) {
  const res = await callAs(gw.url, key, { path: `/llm/x?tokens=${tokens}`, acting: sub })
  const count = (accounted.get(gw) ?? 0) + 1
  accounted.set(gw, count)
  const done = await until(10_000, async () => (await metricValue(gw.app, 'tgw_proxied_requests_total')) >= count)
  if (!done) throw new Error('the gateway did not account the request')
  return res
}

t.test('embedded (no Redis): enforced in process, and by a replica started after', async (t) => {
  const a = await startGateway(t, {
    ...UNHURRIED_LIMITS,
    redis: false,
    usageFlushIntervalMs: HOUR,
    gatewayConfig: { routes },
  })
  const { parent, sub } = await setUp(a)
  for (let i = 0; i < 3; i++) t.equal((await send(a, parent.apiKey, sub, 30)).status, 200)
  await a.app.usageMeter.flush()
  // A second gateway on the same database reads 90 burned: 10 left, one answer passes.
  const b = await startGateway(t, {
    ...UNHURRIED_LIMITS,
    redis: false,
    usageFlushIntervalMs: HOUR,
    gatewayConfig: { routes },
    database: a.database,
  })
  t.equal((await send(b, parent.apiKey, sub, 30)).status, 200, 'the second: 10 left, passes')
  checkProblem(t, await send(b, parent.apiKey, sub, 1), 402, 'credits_exhausted', 'then spent')
})

t.test("Redis forgets the credits' keys: rebuilt from what Postgres burned", async (t) => {
  const gw = await startGateway(t, { ...UNHURRIED_LIMITS, usageFlushIntervalMs: HOUR, gatewayConfig: { routes } })
  const { parent, sub } = await setUp(gw)
  for (let i = 0; i < 3; i++) t.equal((await send(gw, parent.apiKey, sub, 30)).status, 200)
  await gw.app.usageMeter.flush()
  const redis = redisClient(t)
  const keys = await redis.keys(`${gw.redisKeyPrefix}limits:*:credit:*`)
  t.ok(keys.length > 0, "the credits' keys are in Redis")
  await redis.del(...keys)
  // The lease this replica held is spent or given back within its life; then the copy is rebuilt.
  let passed = 0
  for (let i = 0; i < 6; i++) if ((await send(gw, parent.apiKey, sub, 30)).status === 200) passed++
  t.ok(passed <= 2, `after the loss, ${passed} answers of 30 passed: 10 were left (and a lease at most)`)
  checkProblem(t, await send(gw, parent.apiKey, sub, 1), 402, 'credits_exhausted', 'spent')
})
