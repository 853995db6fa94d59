// Units (docs/api.md, Units; docs/configuration.md, `cost` and `meters`), over real sockets to a
// real upstream and the real Postgres: a route's cost weighs its forwarded requests, its upstream
// reports units in a response header or, streamed, in a trailer, which the client does not see
// unless the meter is exposed; the usage report and the usage by key show them beside requests;
// bad reports are ignored and counted, never a failed answer. The meter's timer is an hour long:
// only an explicit flush writes.
import type { ServerResponse } from 'node:http'
import t from 'tap'
import { mintKey } from '../../src/auth/mint.js'
import { createSubAccount } from '../../src/store/tenants.js'
import { utcDay } from '../../src/usage/meter.js'
import { metricValue, startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { startUpstream } from '../helpers/upstream.js'

const HOUR = 3_600_000

/** What the upstream reports: `?tokens=` in X-Tokens-Used (a header, or a trailer on /stream), `?images=` in X-Images. */
function answer(url: string, response: ServerResponse): void {
  const [path, query = ''] = url.split('?')
  const params = new URLSearchParams(query)
  const headers: Record<string, string> = { 'content-type': 'text/plain' }
  const tokens = params.get('tokens')
  const images = params.get('images')
  if (images !== null) headers['x-images'] = images
  if (path!.endsWith('/stream')) {
    // Chunked, the units known at the end: a trailer.
    response.writeHead(200, { ...headers, trailer: 'X-Tokens-Used' })
    response.write('data: one\n\n')
    response.write('data: two\n\n')
    if (tokens !== null) response.addTrailers({ 'X-Tokens-Used': tokens })
    response.end()
    return
  }
  if (tokens !== null) headers['x-tokens-used'] = tokens
  response.writeHead(path!.endsWith('/fail') ? 500 : 200, headers)
  response.end('done')
}

const upstream = await startUpstream(t, (request, response) => answer(request.url!, response))
const gw = await startGateway(t, {
  usageFlushIntervalMs: HOUR,
  gatewayConfig: {
    routes: [
      {
        prefix: '/llm',
        upstream: upstream.url,
        cost: 3,
        meters: [
          { name: 'tokens', header: 'X-Tokens-Used' },
          { name: 'images', header: 'X-Images', expose: true },
        ],
      },
      { prefix: '/plain', upstream: upstream.url, scopes: { write: ['plain:write'] } },
    ],
  },
})
const sql = gw.database.sql
const P = await gw.createParent({ name: 'P' })
const A = await createSubAccount(sql, P.id, { name: 'A', externalId: 'a', metadata: {} })
const B = await createSubAccount(sql, P.id, { name: 'B', externalId: null, metadata: {} })
const aKey = await mintKey(sql, { tenantId: A.id, name: 'a', scopes: [], withClientSecret: false })
const bKey = await mintKey(sql, { tenantId: B.id, name: 'b', scopes: [], withClientSecret: false })
const today = utcDay(Date.now())

const call = (key: string, path: string, acting?: string, method = 'GET') =>
  callAs(gw.url, key, { method, path, ...(acting === undefined ? {} : { acting }) })

const usage = async () => {
  await gw.app.usageMeter.flush()
  const res = await gw.call(P.apiKey, { method: 'GET', url: '/v1/sub-accounts/usage' })
  if (res.statusCode !== 200) throw new Error(res.body)
  return new Map(
    (res.json().data as { sub_account_id: string; units: unknown; days: { units: unknown }[] }[]).map((e) => [
      e.sub_account_id,
      e,
    ]),
  )
}

t.test('a header report is counted and taken out; an exposed one passes; cost weighs requests', async (t) => {
  const res = await call(aKey.apiKey, '/llm/complete?tokens=120&images=2')
  t.equal(res.status, 200)
  t.equal(res.body, 'done')
  t.equal(res.headers['x-tokens-used'], undefined, 'the report is not the client’s')
  t.equal(res.headers['x-images'], '2', 'an exposed meter’s header passes')

  await call(aKey.apiKey, '/llm/complete?tokens=0') // a report of 0 units is a report
  await call(aKey.apiKey, '/llm/complete') // no report: 0 units
  await call(P.apiKey, '/llm/complete?tokens=1000', A.id) // the parent acting as A: A's units
  t.equal((await call(aKey.apiKey, '/llm/fail?tokens=7')).status, 500, 'an upstream 500 is forwarded: it counts')
  await call(aKey.apiKey, '/plain/x') // cost 1, no meters
  // Refused by the gateway (a scope): not forwarded, no units.
  t.equal((await call(aKey.apiKey, '/plain/x', undefined, 'POST')).status, 403)

  const a = (await usage()).get(A.id)!
  const expected = { requests: 5 * 3 + 1, tokens: 120 + 0 + 1000 + 7, images: 2 }
  t.same(a.units, expected, 'request units at each route’s cost, and each meter’s reported sum')
  t.same(a.days, [{ date: today, requests: 7, units: expected }], 'the day carries them too')
})

t.test('a streamed answer reports in a trailer, which the client does not get', async (t) => {
  const before = (await usage()).get(B.id)
  const res = await call(bKey.apiKey, '/llm/stream?tokens=512&images=1')
  t.equal(res.status, 200)
  t.equal(res.body, 'data: one\n\ndata: two\n\n', 'the stream passes whole')
  t.equal(res.trailers?.['x-tokens-used'], undefined, 'the trailer is not the client’s')
  t.equal(res.headers['x-images'], '1')
  await call(bKey.apiKey, '/llm/stream?tokens=8')
  const b = (await usage()).get(B.id)!
  t.equal(before, undefined, 'B had no usage before')
  t.same(b.units, { requests: 6, tokens: 520, images: 1 })
})

t.test('the usage by key carries the units of each key', async (t) => {
  await call(P.apiKey, '/llm/complete?tokens=5', B.id)
  await gw.app.usageMeter.flush()
  const res = await gw.call(P.apiKey, { method: 'GET', url: `/v1/sub-accounts/${B.id}/usage` })
  t.equal(res.statusCode, 200, res.body)
  const byKey = new Map(
    (res.json().data as { key_id: string; units: unknown; days: { units: unknown }[] }[]).map((e) => [e.key_id, e]),
  )
  t.same(byKey.get(bKey.row.id)?.units, { requests: 6, tokens: 520, images: 1 }, "B's own key")
  t.same(byKey.get(P.keyId)?.units, { requests: 3, tokens: 5 }, 'the parent’s key acting as B')
  t.same(
    byKey.get(P.keyId)?.days.map((d) => d.units),
    [{ requests: 3, tokens: 5 }],
  )
})

t.test('bad reports are ignored and counted, and the answer is the upstream’s', async (t) => {
  const bad = ['-1', '1.5', 'twelve', '1000000000001', '99999999999999', '1e3', '0x10', '']
  const before = await metricValue(gw.app, 'tgw_meter_bad_reports_total', { route: '/llm', meter: 'tokens' })
  t.equal(before, 0, 'the series shows before the first bad report')
  const usedBefore = (await usage()).get(A.id)!.units as Record<string, number>
  for (const value of bad) {
    const res = await call(aKey.apiKey, `/llm/complete?tokens=${encodeURIComponent(value)}`)
    t.equal(res.status, 200, `${JSON.stringify(value)}: still the upstream's 200`)
    t.equal(res.headers['x-tokens-used'], undefined, `${JSON.stringify(value)}: still taken out`)
  }
  const streamed = await call(aKey.apiKey, '/llm/stream?tokens=-5')
  t.equal(streamed.status, 200)
  t.equal(streamed.body, 'data: one\n\ndata: two\n\n', 'a bad trailer leaves the streamed answer whole')
  const largest = await call(aKey.apiKey, '/llm/complete?tokens=1000000000000')
  t.equal(largest.status, 200, '10^12 is the largest good report')

  t.equal(
    await metricValue(gw.app, 'tgw_meter_bad_reports_total', { route: '/llm', meter: 'tokens' }),
    bad.length + 1,
    'each bad report counted, header or trailer',
  )
  const used = (await usage()).get(A.id)!.units as Record<string, number>
  t.equal(used.tokens! - usedBefore.tokens!, 1_000_000_000_000, 'only the good report counts')
  t.equal(used.requests! - usedBefore.requests!, (bad.length + 2) * 3, 'every forwarded request still counts its cost')
})

t.test('a report with whitespace around it is its value, header or trailer (RFC 9110 §5.5)', async (t) => {
  const before = await metricValue(gw.app, 'tgw_meter_bad_reports_total', { route: '/llm', meter: 'tokens' })
  const usedBefore = (await usage()).get(A.id)!.units as Record<string, number>
  for (const value of ['  9  ', '\t9', '9 \t']) {
    const res = await call(aKey.apiKey, `/llm/complete?tokens=${encodeURIComponent(value)}`)
    t.equal(res.status, 200)
  }
  t.equal((await call(aKey.apiKey, `/llm/stream?tokens=${encodeURIComponent('  9  ')}`)).status, 200)
  // Whitespace alone, or around something else, is still a bad report.
  t.equal((await call(aKey.apiKey, `/llm/complete?tokens=${encodeURIComponent(' 9 9 ')}`)).status, 200)
  const used = (await usage()).get(A.id)!.units as Record<string, number>
  t.equal(used.tokens! - usedBefore.tokens!, 4 * 9, '`  9  ` counts 9, four times')
  t.equal(
    await metricValue(gw.app, 'tgw_meter_bad_reports_total', { route: '/llm', meter: 'tokens' }),
    before + 1,
    'only ` 9 9 ` is a bad report',
  )
})

t.test('many concurrent answers: the meter equals what the upstream reported', async (t) => {
  const before = ((await usage()).get(A.id)!.units as Record<string, number>).tokens!
  let reported = 0
  const paths = Array.from({ length: 300 }, (_, i) => {
    const tokens = (i * 7919) % 1000
    reported += tokens
    return i % 3 === 0 ? `/llm/stream?tokens=${tokens}` : `/llm/complete?tokens=${tokens}`
  })
  for (let i = 0; i < paths.length; i += 30)
    await Promise.all(paths.slice(i, i + 30).map((path) => call(aKey.apiKey, path)))
  const after = ((await usage()).get(A.id)!.units as Record<string, number>).tokens!
  t.equal(after - before, reported)
})

t.test("the request log keeps a proxied record's cost and its reported units", async (t) => {
  await call(aKey.apiKey, '/llm/complete?tokens=77&images=3')
  await call(aKey.apiKey, '/llm/complete')
  await call(aKey.apiKey, '/plain/y')
  await gw.app.requestLog!.flush()
  const res = await gw.call(P.apiKey, {
    method: 'GET',
    url: `/v1/sub-accounts/requests?sub_account_id=${A.id}&limit=3`,
  })
  t.equal(res.statusCode, 200, res.body)
  const [plain, unreported, reported] = res.json().data as Record<string, unknown>[]
  t.match(reported, { path: '/llm/complete', cost: 3, units: { tokens: 77, images: 3 } })
  t.match(unreported, { path: '/llm/complete', cost: 3 })
  t.notOk('units' in unreported!, 'no report, no units')
  t.match(plain, { path: '/plain/y', cost: 1 })
  const management = await gw.call(P.apiKey, {
    method: 'GET',
    url: '/v1/sub-accounts/requests?route=management&limit=1',
  })
  const [own] = management.json().data as Record<string, unknown>[]
  t.notOk(own === undefined || 'cost' in own || 'units' in own, 'a management record has neither')
})
