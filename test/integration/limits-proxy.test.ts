// Limits and quotas on proxied requests (docs/api.md), over real sockets with Postgres, Redis and
// an upstream: both levels, both kinds, the 429s and their fields, the RateLimit fields, and what
// is not counted (refusals, public routes).
import t from 'tap'
import { writeAccountLimits } from '../../src/limits/store.js'
import { metricValue, startGateway, type TestGateway } from '../helpers/gateway.js'
import { callAs, type RawResponse } from '../helpers/http.js'
import { eventually, sleep } from '../helpers/poll.js'
import { checkProblem } from '../helpers/problems.js'
import { startUpstream } from '../helpers/upstream.js'

const upstream = await startUpstream(t)
const gw = await startGateway(t, {
  usageFlushIntervalMs: 100,
  gatewayConfig: {
    routes: [
      { prefix: '/v1/things', upstream: upstream.url, scopes: { write: ['things:write'] } },
      { prefix: '/open', upstream: upstream.url, public: true },
    ],
  },
})

async function subAccount(parentKey: string, name: string, limits?: unknown): Promise<string> {
  const res = await callAs(gw.url, parentKey, {
    method: 'POST',
    path: '/v1/sub-accounts',
    acting: 'self',
    json: { name, ...(limits === undefined ? {} : { limits }) },
  })
  if (res.status !== 201) throw new Error(`create ${name}: ${res.status} ${res.body}`)
  return res.json().id as string
}

/**
 * A limit with a small N leases one unit at a time (a lease is at most a tenth of it), renewed in
 * the background: requests a few ms apart may find the renewal still on its way and be refused
 * (under, never over). The tests that count exact admissions leave it time.
 */
const renewal = () => sleep(150)

const forwarded = (path: string) => upstream.received.filter((r) => r.url.startsWith(path)).length

async function usageOf(g: TestGateway, parentKey: string, subId: string) {
  const res = await callAs(g.url, parentKey, { path: '/v1/sub-accounts/usage' })
  return (
    res.json().data as { sub_account_id: string; requests: number; limited: { rate: number; quota: number } }[]
  ).find((entry) => entry.sub_account_id === subId)
}

t.test("a sub-account's rate: N pass, then 429 rate_limited with its fields", async (t) => {
  const parent = await gw.createParent({ scopes: ['sub_accounts:read', 'sub_accounts:write', 'things:read'] })
  const sub = await subAccount(parent.apiKey, 'rated', { rate: { requests: 3, per_seconds: 10 } })

  // Refusals before the limit take nothing from it: a write without the route's scope.
  for (let i = 0; i < 2; i++) {
    const refused = await callAs(gw.url, parent.apiKey, {
      method: 'POST',
      path: '/v1/things/r',
      acting: sub,
      body: 'x',
    })
    t.equal(refused.status, 403, 'refused for its scope')
  }
  const passed: RawResponse[] = []
  for (let i = 0; i < 3; i++) {
    passed.push(await callAs(gw.url, parent.apiKey, { path: `/v1/things/rate-${i}`, acting: sub }))
    await renewal()
  }
  t.same(
    passed.map((res) => res.status),
    [200, 200, 200],
    'N = 3 pass',
  )
  t.equal(passed[0]!.headers['ratelimit-policy'], '"sub_account.rate";q=3;w=10')
  const left = passed.map((res) => Number(/r=(\d+)/.exec(String(res.headers.ratelimit))?.[1]))
  t.ok(
    left[0]! <= 2 && left[2] === 0 && left[0]! >= left[1]! && left[1]! >= left[2]!,
    `RateLimit counts down what is left: ${left}`,
  )
  const refused = await callAs(gw.url, parent.apiKey, { path: '/v1/things/rate-4', acting: sub })
  const body = checkProblem(t, refused, 429, 'rate_limited', 'the fourth')
  t.same(body.violated_policies, ['sub_account.rate'])
  const retryAfter = Number(refused.headers['retry-after'])
  t.ok(retryAfter >= 1 && retryAfter <= 4, `Retry-After in whole seconds until a token: ${retryAfter}`)
  t.match(String(refused.headers.ratelimit), /^"sub_account.rate";r=0;t=\d+$/)
  t.equal(forwarded('/v1/things/rate-'), 3, 'the upstream got the three')

  await eventually(3_000, async () => (await usageOf(gw, parent.apiKey, sub))?.limited.rate === 1)
  t.same((await usageOf(gw, parent.apiKey, sub))?.limited, { rate: 1, quota: 0 }, 'the report counts the 429')
})

t.test("an account's monthly quota bounds the parent and all its sub-accounts together", async (t) => {
  const parent = await gw.createParent({ scopes: ['sub_accounts:read', 'sub_accounts:write', 'things:read'] })
  const [a, b] = [await subAccount(parent.apiKey, 'a'), await subAccount(parent.apiKey, 'b')]
  await writeAccountLimits(gw.sql, parent.id, { rate: null, monthly_quota: { requests: 4 } })
  // The gateway reads limits through its cache: the CLI and the API invalidate it; here, by hand.
  await gw.app.tenancyCache.invalidate([`tenant:${parent.id}`])

  const statuses: number[] = []
  for (const acting of [a, b, 'self', a, b, a]) {
    await renewal()
    const res = await callAs(gw.url, parent.apiKey, { path: '/v1/things/q', acting })
    statuses.push(res.status)
    if (res.status === 429) {
      const body = checkProblem(t, res, 429, 'quota_exceeded', 'over the quota')
      t.same(body.violated_policies, ['account.monthly_quota'])
      const retryAfter = Number(res.headers['retry-after'])
      t.ok(retryAfter >= 1 && retryAfter <= 31 * 86_400, `Retry-After: until the next month (${retryAfter} s)`)
    }
  }
  t.same(statuses, [200, 200, 200, 200, 429, 429], 'M = 4 over the parent and both sub-accounts, whoever sends')
  t.match(
    (await callAs(gw.url, parent.apiKey, { path: '/v1/things/q', acting: a })).headers['ratelimit-policy'],
    /^"account.monthly_quota";q=4;w=\d+$/,
  )
  await eventually(3_000, async () => {
    const res = await callAs(gw.url, parent.apiKey, { path: '/v1/sub-accounts/limits' })
    return res.json().used === 4
  })
  const limits = (await callAs(gw.url, parent.apiKey, { path: '/v1/sub-accounts/limits' })).json()
  t.same(limits.account.monthly_quota, { requests: 4 })
  t.equal(limits.used, 4, 'GET /v1/sub-accounts/limits: the forwarded requests of the month')
})

t.test('both levels: the first limit that refuses answers, and every one that refuses is named', async (t) => {
  const parent = await gw.createParent({ scopes: ['sub_accounts:read', 'sub_accounts:write', 'things:read'] })
  const sub = await subAccount(parent.apiKey, 'both', { rate: { requests: 2, per_seconds: 60 } })
  await writeAccountLimits(gw.sql, parent.id, { rate: { requests: 2, per_seconds: 60 }, monthly_quota: null })
  await gw.app.tenancyCache.invalidate([`tenant:${parent.id}`])

  const first = await callAs(gw.url, parent.apiKey, { path: '/v1/things/b', acting: sub })
  t.equal(first.status, 200)
  await renewal()
  t.equal(
    first.headers['ratelimit-policy'],
    '"sub_account.rate";q=2;w=60, "account.rate";q=2;w=60',
    'every limit, in order',
  )
  t.equal((await callAs(gw.url, parent.apiKey, { path: '/v1/things/b', acting: sub })).status, 200)
  await renewal()
  const refused = await callAs(gw.url, parent.apiKey, { path: '/v1/things/b', acting: sub })
  t.same(checkProblem(t, refused, 429, 'rate_limited', 'both spent').violated_policies, [
    'sub_account.rate',
    'account.rate',
  ])
  const asParent = await callAs(gw.url, parent.apiKey, { path: '/v1/things/b' })
  t.same(
    checkProblem(t, asParent, 429, 'rate_limited', 'the parent itself').violated_policies,
    ['account.rate'],
    "the parent's own requests meet the account's limit",
  )
})

t.test('public routes and tenants without limits are not limited and carry no RateLimit fields', async (t) => {
  const parent = await gw.createParent({ scopes: ['sub_accounts:read', 'sub_accounts:write', 'things:read'] })
  await writeAccountLimits(gw.sql, parent.id, { rate: { requests: 1, per_seconds: 60 }, monthly_quota: null })
  await gw.app.tenancyCache.invalidate([`tenant:${parent.id}`])
  for (let i = 0; i < 3; i++) {
    const open = await callAs(gw.url, parent.apiKey, { path: '/open/x' })
    t.equal(open.status, 200, 'a public route, even with a key')
    t.notOk('ratelimit' in open.headers)
  }
  t.equal((await callAs(gw.url, parent.apiKey, { path: '/v1/things/p' })).status, 200, 'the one request of the rate')
  const free = await gw.createParent()
  for (let i = 0; i < 3; i++) {
    const res = await callAs(gw.url, free.apiKey, { path: '/v1/things/free' })
    t.equal(res.status, 200)
    t.notOk('ratelimit-policy' in res.headers, 'no limits, no fields')
  }
})

t.test("a tenant's first request under limits waits for its leases, the next ones do not", async (t) => {
  const parent = await gw.createParent({ scopes: ['sub_accounts:read', 'sub_accounts:write', 'things:read'] })
  const sub = await subAccount(parent.apiKey, 'warmed', { rate: { requests: 1000, per_seconds: 1 } })
  const coldWaits = () => metricValue(gw.app, 'tgw_limit_cold_waits_total')
  const before = await coldWaits()
  for (let i = 0; i < 5; i++)
    t.equal((await callAs(gw.url, parent.apiKey, { path: `/v1/things/warm-${i}`, acting: sub })).status, 200)
  t.equal((await coldWaits()) - before, 1, 'tgw_limit_cold_waits_total counts the first request only')
})

t.test('a burst after an idle second waits for a renewal rather than being refused', async (t) => {
  // After a second without requests a lease shrinks to one unit; the burst's first request spends
  // it, and the others, finding the lease empty while the shared state has plenty, wait for the
  // renewal under way (they used to be refused: 429 with 995 of 1,000 units left).
  const parent = await gw.createParent({ scopes: ['sub_accounts:read', 'sub_accounts:write', 'things:read'] })
  const sub = await subAccount(parent.apiKey, 'bursty', { rate: { requests: 1000, per_seconds: 1 } })
  for (let round = 0; round < 3; round++) {
    await sleep(1_500)
    const statuses = await Promise.all(
      Array.from({ length: 5 }, async (_, i) => {
        const res = await callAs(gw.url, parent.apiKey, { path: `/v1/things/burst-${round}-${i}`, acting: sub })
        return res.status
      }),
    )
    t.same(statuses, [200, 200, 200, 200, 200], `round ${round}: every request of the burst passes`)
  }
  const managed = await startGateway(t, { env: { MANAGEMENT_RATE: '1000/1s' } })
  const owner = await managed.createParent()
  await callAs(managed.url, owner.apiKey, { path: '/v1/sub-accounts' })
  await sleep(1_500)
  const calls = await Promise.all(
    Array.from({ length: 3 }, () => callAs(managed.url, owner.apiKey, { path: '/v1/sub-accounts' })),
  )
  t.same(
    calls.map((res) => res.status),
    [200, 200, 200],
    'management calls in quick succession after an idle second',
  )
})

t.test('the management API has a rate of its own per parent (MANAGEMENT_RATE)', async (t) => {
  const managed = await startGateway(t, { env: { MANAGEMENT_RATE: '3/60s' } })
  const [parent, other] = [await managed.createParent(), await managed.createParent()]
  const statuses: number[] = []
  let last: RawResponse | undefined
  for (let i = 0; i < 4; i++) {
    await renewal()
    last = await callAs(managed.url, parent.apiKey, { path: '/v1/sub-accounts' })
    statuses.push(last.status)
  }
  t.same(statuses, [200, 200, 200, 429])
  t.same(checkProblem(t, last!, 429, 'rate_limited', 'the fourth call').violated_policies, ['management.rate'])
  t.ok(Number(last!.headers['retry-after']) >= 1)
  t.equal(last!.headers['ratelimit-policy'], '"management.rate";q=3;w=60')
  t.equal((await callAs(managed.url, other.apiKey, { path: '/v1/sub-accounts' })).status, 200, 'per parent')
  const unauthenticated = await callAs(managed.url, 'tgw_nope', { path: '/v1/sub-accounts' })
  t.equal(unauthenticated.status, 401, 'a 401 comes before the rate and takes nothing')
})

t.test('without Redis (one process), limits are enforced in process', async (t) => {
  const solo = await startGateway(t, {
    redis: false,
    gatewayConfig: { routes: [{ prefix: '/v1/things', upstream: upstream.url }] },
  })
  const parent = await solo.createParent()
  await writeAccountLimits(solo.sql, parent.id, { rate: { requests: 2, per_seconds: 60 }, monthly_quota: null })
  const statuses: number[] = []
  for (let i = 0; i < 3; i++) statuses.push((await callAs(solo.url, parent.apiKey, { path: '/v1/things/solo' })).status)
  t.same(statuses, [200, 200, 429], 'N = 2 per minute, with no Redis at all')
  t.equal(await metricValue(solo.app, 'tgw_limits_degraded'), 0, 'not degraded: there is no Redis to miss')
})

t.test("a fresh Redis's grace does not refuse management calls", async (t) => {
  // The real grace: this gateway's key prefix is new to Redis, as a fresh deployment's is.
  const fresh = await startGateway(t, { limitTimings: { graceMs: 3_000 }, env: { MANAGEMENT_RATE: '3/60s' } })
  const parent = await fresh.createParent()
  const first = await callAs(fresh.url, parent.apiKey, { path: '/v1/sub-accounts' })
  t.equal(first.status, 200, `the first call right after start: ${first.status}`)
})
