// Limits on the management API (docs/api.md, Limits and quotas), over real sockets against two
// replicas sharing Postgres and a Redis prefix: validation, create and PATCH (the whole object is
// replaced), what every sub-account response shows, GET /v1/sub-accounts/limits, the usage
// report's `limited`, and a change reaching the other replica's cached records within 1 s.
import t from 'tap'
import { monthOf } from '../../src/limits/month.js'
import { writeAccountLimits } from '../../src/limits/store.js'
import { startGateway, type GatewayOptions, type TestGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { eventually } from '../helpers/poll.js'
import { redisClient } from '../helpers/redis.js'
import { startUpstream } from '../helpers/upstream.js'

// In-process entries that live a minute: a replica sees a change within a second only if told.
const SLOW_LOCAL_EXPIRY: GatewayOptions['cacheTimings'] = {
  localTtlMs: 60_000,
  negativeTtlMs: 60_000,
  reinvalidateAfterMs: 60_000,
}
const HOUR = 3_600_000

const upstream = await startUpstream(t)
const a = await startGateway(t, {
  upstreamUrl: upstream.url,
  cacheTimings: SLOW_LOCAL_EXPIRY,
  usageFlushIntervalMs: HOUR,
})
const b = await startGateway(t, {
  upstreamUrl: upstream.url,
  database: a.database,
  redisKeyPrefix: a.redisKeyPrefix,
  cacheTimings: SLOW_LOCAL_EXPIRY,
  usageFlushIntervalMs: HOUR,
})
const sql = a.database.sql

// A change made before a replica has subscribed would be lost to it: start once both listen.
const redis = redisClient(t)
const subscribed = await eventually(5_000, async () => {
  const reply = (await redis.pubsub('NUMSUB', `${a.redisKeyPrefix}invalidate`)) as [string, number | string]
  return Number(reply[1]) === 2
})

const request = (
  gw: TestGateway,
  key: string,
  options: { method?: string; path: string; json?: unknown; acting?: string },
) => callAs(gw.url, key, { acting: 'self', ...options, headers: [['Host', new URL(gw.url).host]] })
const manage = (key: string, method: string, path: string, json?: unknown) =>
  request(a, key, { method, path: `/v1/sub-accounts${path}`, ...(json === undefined ? {} : { json }) })

const NONE = { rate: null, monthly_quota: null }
const RATE = { requests: 100, per_seconds: 60 }
const QUOTA = { requests: 10_000 }
const P = await a.createParent({ name: 'P' })
// Asserted after the last top-level await: tap ends a root test that idles after an assertion.
t.ok(subscribed !== null, 'both replicas listen for invalidations')

async function create(body: Record<string, unknown>) {
  const res = await manage(P.apiKey, 'POST', '', { name: 'sub', ...body })
  if (res.status !== 201) throw new Error(`create: ${res.status} ${res.body}`)
  return res.json() as { id: string; limits: unknown }
}
const storedLimitsOf = async (id: string) => (await sql`select limits from tenants where id = ${id}`)[0]!.limits

t.test('validation: 400 validation_failed naming the field, nothing written', async (t) => {
  const sub = await create({ limits: { rate: RATE } })
  const [before] = await sql`select count(*)::int as n from tenants`
  const cases: [unknown, string][] = [
    [{ rate: { requests: 0, per_seconds: 1 } }, '/body/limits/rate/requests'],
    [{ rate: { requests: 1_000_000_001, per_seconds: 1 } }, '/body/limits/rate/requests'],
    [{ rate: { requests: '5', per_seconds: 1 } }, '/body/limits/rate/requests'],
    [{ rate: { requests: 5, per_seconds: 0 } }, '/body/limits/rate/per_seconds'],
    [{ rate: { requests: 5, per_seconds: 3601 } }, '/body/limits/rate/per_seconds'],
    [{ rate: { requests: 5 } }, '/body/limits/rate/per_seconds'],
    [{ monthly_quota: { requests: 0 } }, '/body/limits/monthly_quota/requests'],
    [{ monthly_quota: { requests: 2.5 } }, '/body/limits/monthly_quota/requests'],
    [{ monthly_quota: { requests: 5, per: 'month' } }, '/body/limits/monthly_quota/per'],
    [{ burst: 5 }, '/body/limits/burst'],
    ['unlimited', '/body/limits'],
  ]
  for (const [limits, path] of cases) {
    for (const [method, where] of [
      ['POST', ''],
      ['PATCH', `/${sub.id}`],
    ] as const) {
      const res = await manage(P.apiKey, method, where, { ...(method === 'POST' ? { name: 'bad' } : {}), limits })
      const body = res.json() as { code?: string; errors?: { path: string }[] }
      t.equal(res.status, 400, `${method} ${JSON.stringify(limits)}`)
      t.equal(body.code, 'validation_failed')
      t.ok(
        body.errors?.some((e) => e.path === path),
        `names ${path}: ${JSON.stringify(body.errors?.map((e) => e.path))}`,
      )
    }
  }
  const [after] = await sql`select count(*)::int as n from tenants`
  t.equal(after!.n, before!.n, 'no sub-account created')
  t.same(await storedLimitsOf(sub.id), { rate: RATE, monthly_quota: null }, 'the limits are unchanged')
})

t.test('create and PATCH: a whole object, a member left out is null, null clears', async (t) => {
  t.same((await create({})).limits, NONE, 'none given: both null')
  const empty = await create({ limits: {} })
  t.same(empty.limits, NONE)
  t.equal(await storedLimitsOf(empty.id), null, 'stored as null')
  t.same((await create({ limits: null })).limits, NONE)
  const sub = await create({ limits: { rate: RATE, monthly_quota: QUOTA } })
  t.same(sub.limits, { rate: RATE, monthly_quota: QUOTA })

  const patch = async (body: unknown, expected: unknown, what: string) => {
    const res = await manage(P.apiKey, 'PATCH', `/${sub.id}`, body)
    t.equal(res.status, 200, res.body)
    t.same(res.json().limits, expected, what)
    const got = await manage(P.apiKey, 'GET', `/${sub.id}`)
    t.same(got.json().limits, expected, `${what} (GET)`)
  }
  await patch({ name: 'renamed' }, { rate: RATE, monthly_quota: QUOTA }, 'a PATCH without limits keeps them')
  await patch(
    { limits: { monthly_quota: { requests: 7 } } },
    { rate: null, monthly_quota: { requests: 7 } },
    'replaced whole',
  )
  await patch({ limits: { rate: RATE, monthly_quota: null } }, { rate: RATE, monthly_quota: null }, 'explicit null')
  await patch({ limits: null }, NONE, 'null clears both')
  t.equal(await storedLimitsOf(sub.id), null, 'stored as null')
  await patch(
    { limits: { rate: { requests: 1_000_000_000, per_seconds: 3600 } } },
    { rate: { requests: 1_000_000_000, per_seconds: 3600 }, monthly_quota: null },
    'the bounds pass',
  )

  const list = await manage(P.apiKey, 'GET', `?limit=100`)
  const listed = (list.json().data as { id: string; limits: unknown }[]).find((s) => s.id === sub.id)
  t.same(
    listed?.limits,
    { rate: { requests: 1_000_000_000, per_seconds: 3600 }, monthly_quota: null },
    'the list shows them',
  )
  for (const s of list.json().data as { limits: unknown }[]) t.ok(s.limits !== undefined, 'every entry has limits')
  const deactivated = await manage(P.apiKey, 'POST', `/${empty.id}/deactivate`)
  t.same(deactivated.json().limits, NONE, 'deactivate answers the limits too')
})

t.test('GET /v1/sub-accounts/limits: the account limits and this month forwarded use', async (t) => {
  const Q = await a.createParent({ name: 'Q' })
  const first = await request(b, Q.apiKey, { path: '/v1/sub-accounts/limits' })
  t.equal(first.status, 200, first.body)
  t.same(first.json(), { account: NONE, month: monthOf(Date.now()), used: 0 })

  const res = await request(a, Q.apiKey, { method: 'POST', path: '/v1/sub-accounts', json: { name: 's' } })
  const sub = res.json() as { id: string }
  // Forwarded: 2 as Q itself, 3 as its sub-account, over both replicas; refused: not counted.
  for (const gw of [a, b]) await request(gw, Q.apiKey, { path: '/x' })
  for (const gw of [a, b, b]) await request(gw, Q.apiKey, { path: '/x', acting: sub.id })
  const refused = await request(a, Q.apiKey, { path: '/x', acting: '00000000-0000-4000-8000-000000000000' })
  t.equal(refused.status, 403)
  await a.app.usageMeter.flush()
  await b.app.usageMeter.flush()
  await writeAccountLimits(sql, Q.id, { rate: { requests: 50, per_seconds: 1 }, monthly_quota: null })

  const after = await request(a, Q.apiKey, { path: '/v1/sub-accounts/limits' })
  t.same(after.json(), {
    account: { rate: { requests: 50, per_seconds: 1 }, monthly_quota: null },
    month: monthOf(Date.now()),
    used: 5,
  })
  const other = await request(a, P.apiKey, { path: '/v1/sub-accounts/limits' })
  t.equal(other.json().used, 0, "another parent's use is its own")
  const unknown = await request(a, Q.apiKey, { path: '/v1/sub-accounts/limits?month=2026-01' })
  t.equal(unknown.status, 400)
  t.equal(unknown.json().code, 'validation_failed', 'unknown parameters are refused')
  const subKey = await request(a, Q.apiKey, {
    method: 'POST',
    path: `/v1/sub-accounts/${sub.id}/api-keys`,
    json: { name: 'k', scopes: ['x:read'] },
  })
  const asSub = await request(a, subKey.json().api_key, { path: '/v1/sub-accounts/limits' })
  t.equal(asSub.status, 403)
  t.equal(asSub.json().code, 'parent_key_required')

  // The usage report shows each sub-account's 429s of each kind.
  b.app.usageMeter.limited(sub.id, 'rate')
  b.app.usageMeter.limited(sub.id, 'rate')
  b.app.usageMeter.limited(sub.id, 'quota')
  await b.app.usageMeter.flush()
  const report = await request(a, Q.apiKey, { path: '/v1/sub-accounts/usage' })
  t.match(report.json().data, [{ sub_account_id: sub.id, requests: 3, limited: { rate: 2, quota: 1 } }])
})

t.test('a limits change reaches the other replica within 1 s', async (t) => {
  const sub = await create({ limits: { rate: RATE } })
  const key = await manage(P.apiKey, 'POST', `/${sub.id}/api-keys`, { name: 'k', scopes: ['x:read'] })
  // B serves both ways of naming the sub-account: its key (tenant:<id>), and the parent acting as it (sub:<parent>:<id>).
  t.equal((await request(b, key.json().api_key, { path: '/x' })).status, 200)
  t.equal((await request(b, P.apiKey, { path: '/x', acting: sub.id })).status, 200)
  const lookups = b.app.tenancyCache.lookups
  const seen = async () => [(await lookups.tenant(sub.id))?.limits, (await lookups.subAccount(P.id, sub.id))?.limits]
  t.same(
    await seen(),
    [
      { rate: RATE, monthly_quota: null },
      { rate: RATE, monthly_quota: null },
    ],
    'B holds them',
  )

  for (const [change, expected] of [
    [
      { rate: RATE, monthly_quota: QUOTA },
      { rate: RATE, monthly_quota: QUOTA },
    ],
    [null, null],
  ] as const) {
    const res = await manage(P.apiKey, 'PATCH', `/${sub.id}`, { limits: change })
    t.equal(res.status, 200)
    const took = await eventually(
      1_000,
      async () => JSON.stringify(await seen()) === JSON.stringify([expected, expected]),
    )
    t.ok(took !== null, `B's records have ${JSON.stringify(expected)} within 1 s (${took} ms)`)
  }
})
