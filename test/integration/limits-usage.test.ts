// What a monthly quota counts (docs/api.md, Limits and quotas;
// docs/decisions/0049-usage-counts-for-quotas.md): the usage meter tells requests forwarded
// upstream apart from the gateway's refusals, over real sockets to a real upstream, and monthUse
// sums the forwarded ones of one UTC month, for a sub-account or for a parent with all its
// sub-accounts. The meter's timer is an hour long, so only an explicit flush writes and every count
// is exact.
import t from 'tap'
import { mintKey } from '../../src/auth/mint.js'
import { monthOf } from '../../src/limits/month.js'
import { monthUse, readLimits, writeAccountLimits } from '../../src/limits/store.js'
import { createSubAccount } from '../../src/store/tenants.js'
import { addUsage } from '../../src/store/usage.js'
import { utcDay } from '../../src/usage/meter.js'
import { startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { REFUSED_URL, startUpstream } from '../helpers/upstream.js'

const HOUR = 3_600_000

const upstream = await startUpstream(t, (request, response) => {
  const match = /\/status\/(\d{3})$/.exec(request.url!.split('?')[0]!)
  response.writeHead(match ? Number(match[1]) : 200, { 'content-type': 'application/json' })
  response.end('{}')
})
const gw = await startGateway(t, {
  upstreamUrl: upstream.url,
  usageFlushIntervalMs: HOUR,
  gatewayConfig: {
    routes: [
      { prefix: '/scoped', upstream: upstream.url, scopes: { read: ['tracking:read'] } },
      { prefix: '/dead', upstream: REFUSED_URL },
      { prefix: '/public', upstream: upstream.url, public: true },
    ],
  },
})
const sql = gw.database.sql
const host = new URL(gw.url).host
const call = (key: string | null, path: string, acting?: string) =>
  callAs(gw.url, key, { path, ...(acting === undefined ? {} : { acting }), headers: [['Host', host]] })

const P = await gw.createParent({ name: 'P' })
const A = await createSubAccount(sql, P.id, { name: 'A', externalId: null, metadata: {} })
const B = await createSubAccount(sql, P.id, { name: 'B', externalId: null, metadata: {} })
const keyA = await mintKey(sql, { tenantId: A.id, name: 'a', scopes: ['other:read'], withClientSecret: false })
const Q = await gw.createParent({ name: 'Q' })
const C = await createSubAccount(sql, Q.id, { name: 'C', externalId: null, metadata: {} })

interface ClassCounts {
  status_class: number
  requests: number
  forwarded: number
  limited_rate: number
  limited_quota: number
}

async function rowsOf(tenantId: string): Promise<ClassCounts[]> {
  const rows = await sql<Record<keyof ClassCounts, string>[]>`
    select status_class::text, requests::text, forwarded::text, limited_rate::text, limited_quota::text
    from usage_daily where tenant_id = ${tenantId} and day = ${utcDay(Date.now())} order by status_class`
  return rows.map((r) => ({
    status_class: Number(r.status_class),
    requests: Number(r.requests),
    forwarded: Number(r.forwarded),
    limited_rate: Number(r.limited_rate),
    limited_quota: Number(r.limited_quota),
  }))
}

t.test('forwarded requests are told apart from the gateway refusals', async (t) => {
  const expect = async (key: string | null, path: string, status: number, acting?: string) =>
    t.equal((await call(key, path, acting)).status, status, `${path} as ${acting ?? 'itself'}: ${status}`)
  // A's own key: answered by the upstream (any status), refused by the gateway, and failed upstream.
  await expect(keyA.apiKey, '/ok', 200)
  await expect(keyA.apiKey, '/status/404', 404)
  await expect(keyA.apiKey, '/status/500', 500)
  await expect(keyA.apiKey, '/status/503', 503)
  await expect(keyA.apiKey, '/scoped/x', 403) // insufficient_scope: never reaches the upstream
  await expect(keyA.apiKey, '/ok', 403, P.id) // acting_tenant_forbidden: counted for A, not forwarded
  await expect(keyA.apiKey, '/dead/x', 502) // handed to the upstream's connection, which failed
  await expect('tgw_notakey', '/ok', 401) // no tenant: not usage at all
  await expect(keyA.apiKey, '/public/x', 200) // public: not usage
  // The parent acting as A, and as itself.
  await expect(P.apiKey, '/ok', 200, A.id)
  await expect(P.apiKey, '/ok', 200, 'self')
  await expect(P.apiKey, '/ok', 200, 'self')
  await expect(P.apiKey, '/ok', 403, C.id) // another parent's sub-account: P's refusal
  // The limiter's refusals, as the lead's wiring will record them (the 429s themselves are recorded on answer).
  gw.app.usageMeter.limited(A.id, 'rate')
  gw.app.usageMeter.limited(A.id, 'rate')
  gw.app.usageMeter.limited(A.id, 'quota')
  await gw.app.usageMeter.flush()

  t.same(await rowsOf(A.id), [
    { status_class: 2, requests: 2, forwarded: 2, limited_rate: 0, limited_quota: 0 },
    { status_class: 4, requests: 3, forwarded: 1, limited_rate: 2, limited_quota: 1 },
    { status_class: 5, requests: 3, forwarded: 3, limited_rate: 0, limited_quota: 0 },
  ])
  t.same(await rowsOf(P.id), [
    { status_class: 2, requests: 2, forwarded: 2, limited_rate: 0, limited_quota: 0 },
    { status_class: 4, requests: 1, forwarded: 0, limited_rate: 0, limited_quota: 0 },
  ])
  t.same(await rowsOf(C.id), [], 'nothing for the sub-account P was refused as')
})

t.test('monthUse: request units of this UTC month, of a sub-account or of a whole account', async (t) => {
  const month = monthOf(Date.now())
  const [year, mm] = month.split('-').map(Number) as [number, number]
  const lastMonthEnd = utcDay(Date.UTC(year, mm - 1, 1) - 1)
  const nextMonthStart = utcDay(Date.UTC(year, mm, 1))
  // Outside this month, and another parent's sub-account: none of these count.
  // What a quota counts is request units (usage_period_units): the periods' bounds decide the month.
  const units = (tenantId: string, periodStart: string, n: number) =>
    ({ tenantId, periodStart, meter: 'requests', units: n, requests: n }) as const
  await addUsage(sql, '11111111-1111-4111-8111-111111111111', {
    counts: [
      { tenantId: A.id, day: lastMonthEnd, statusClass: 2, requests: 100, forwarded: 100 },
      { tenantId: A.id, day: nextMonthStart, statusClass: 2, requests: 100, forwarded: 100 },
      { tenantId: C.id, day: utcDay(Date.now()), statusClass: 2, requests: 50, forwarded: 50 },
      { tenantId: B.id, day: `${month}-01`, statusClass: 2, requests: 7, forwarded: 5 },
    ],
    unitCounts: [
      units(A.id, `${lastMonthEnd}T23:00:00.000Z`, 100),
      units(A.id, `${nextMonthStart}T00:00:00.000Z`, 100),
      units(C.id, new Date(Date.now() - (Date.now() % 3_600_000)).toISOString(), 50),
      units(B.id, `${month}-01T00:00:00.000Z`, 5),
    ],
  })

  t.equal(await monthUse(sql, { tenantId: A.id, level: 'sub_account' }, month), 6, "A's forwarded, not its refusals")
  t.equal(await monthUse(sql, { tenantId: B.id, level: 'sub_account' }, month), 5, "B's, from the month's first day")
  t.equal(await monthUse(sql, { tenantId: P.id, level: 'sub_account' }, month), 2, "P's own only")
  t.equal(await monthUse(sql, { tenantId: P.id, level: 'account' }, month), 2 + 6 + 5, 'P with A and B')
  t.equal(await monthUse(sql, { tenantId: Q.id, level: 'account' }, month), 50, 'Q with C')
  t.equal(await monthUse(sql, { tenantId: A.id, level: 'sub_account' }, monthOf(Date.UTC(year, mm - 2, 15))), 100)
  t.equal(await monthUse(sql, { tenantId: A.id, level: 'sub_account' }, monthOf(Date.UTC(year, mm, 15))), 100)
  t.equal(await monthUse(sql, { tenantId: Q.id, level: 'account' }, '2001-01'), 0, 'a month without use')
})

t.test('account limits: written on a parent only, read back, cleared', async (t) => {
  const limits = { rate: { requests: 10, per_seconds: 1 }, monthly_quota: { requests: 1000 } }
  t.equal(await writeAccountLimits(sql, A.id, limits), null, 'a sub-account is not an account')
  t.equal(await readLimits(sql, A.id), null, 'and keeps none')
  t.same((await writeAccountLimits(sql, P.id, limits))?.limits, limits)
  t.same(await readLimits(sql, P.id), limits)
  t.equal(
    (await writeAccountLimits(sql, P.id, { rate: null, monthly_quota: null }))?.limits,
    null,
    'none: stored as null',
  )
  t.equal(await readLimits(sql, P.id), null)
})
