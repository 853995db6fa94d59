// A sub-account's usage by key (docs/api.md, Usage by key) and the usage report's include=name,
// over real sockets to a real upstream and the real Postgres: the meter counts each request for
// the key that made it as well as for the tenant it acted as, in the same flush; the report lists
// the sub-account's own keys and its parent's keys acting as it, whose counts add up to the
// sub-account's. The meter's timer is an hour long: only an explicit flush writes.
import t from 'tap'
import { mintKey } from '../../src/auth/mint.js'
import { createSubAccount } from '../../src/store/tenants.js'
import { utcDay } from '../../src/usage/meter.js'
import { startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { problemOf } from '../helpers/problems.js'
import { startUpstream } from '../helpers/upstream.js'

const HOUR = 3_600_000

const upstream = await startUpstream(t, (request, response) => {
  const match = /\/status\/(\d{3})$/.exec(request.url!.split('?')[0]!)
  response.writeHead(match ? Number(match[1]) : 200, { 'content-type': 'application/json' })
  response.end('{}')
})
const gw = await startGateway(t, {
  upstreamUrl: upstream.url,
  usageFlushIntervalMs: HOUR,
  gatewayConfig: { routes: [{ prefix: '/scoped', upstream: upstream.url, scopes: { read: ['tracking:read'] } }] },
})
const sql = gw.database.sql
const host = new URL(gw.url).host
const call = (key: string | null, path: string, acting?: string) =>
  callAs(gw.url, key, { path, ...(acting === undefined ? {} : { acting }), headers: [['Host', host]] })

const P = await gw.createParent({ name: 'P' })
const A = await createSubAccount(sql, P.id, { name: 'Shop A', externalId: 'shop-a', metadata: {} })
const B = await createSubAccount(sql, P.id, { name: 'Shop B', externalId: null, metadata: {} })
const mint = (tenantId: string, name: string) =>
  mintKey(sql, { tenantId, name, scopes: ['other:read'], withClientSecret: false })
const a1 = await mint(A.id, 'a-one')
const a2 = await mint(A.id, 'a-two')
const aIdle = await mint(A.id, 'a-idle')
const b1 = await mint(B.id, 'b-one')
const Q = await gw.createParent({ name: 'Q' })
const C = await createSubAccount(sql, Q.id, { name: 'C', externalId: null, metadata: {} })

async function expect(key: string, path: string, status: number, acting?: string) {
  const res = await call(key, path, acting)
  if (res.status !== status) throw new Error(`${path}: ${res.status}, wanted ${status}: ${res.body}`)
}

const report = (key: string, subId: string, query = '') =>
  gw.call(key, { method: 'GET', url: `/v1/sub-accounts/${subId}/usage${query}` })

t.test('requests are counted by key, and the keys add up to the sub-account', async (t) => {
  for (let i = 0; i < 3; i++) await expect(a1.apiKey, '/ok', 200)
  await expect(a1.apiKey, '/status/404', 404)
  await expect(a1.apiKey, '/status/500', 500)
  await expect(a2.apiKey, '/ok', 200)
  await expect(a2.apiKey, '/scoped/x', 403) // a refusal after authentication counts, as in the report
  await expect(P.apiKey, '/ok', 200, A.id) // the parent acting as A
  await expect(P.apiKey, '/ok', 200, A.id)
  await expect(b1.apiKey, '/ok', 200)
  await gw.app.usageMeter.flush()

  const res = await report(P.apiKey, A.id)
  t.equal(res.statusCode, 200, res.body)
  const body = res.json()
  const today = utcDay(Date.now())
  t.equal(body.sub_account_id, A.id)
  t.equal(body.to, today)
  t.same(
    body.data,
    [
      {
        key_id: P.keyId,
        name: body.data[0].name,
        prefix: body.data[0].prefix,
        owner: 'parent',
        requests: 2,
        by_status: { '2xx': 2, '3xx': 0, '4xx': 0, '5xx': 0 },
        days: [{ date: today, requests: 2, units: { requests: 2 } }],
        units: { requests: 2 },
      },
      {
        key_id: a1.row.id,
        name: 'a-one',
        prefix: a1.row.prefix,
        owner: 'sub_account',
        requests: 5,
        by_status: { '2xx': 3, '3xx': 0, '4xx': 1, '5xx': 1 },
        days: [{ date: today, requests: 5, units: { requests: 5 } }],
        units: { requests: 5 },
      },
      {
        key_id: a2.row.id,
        name: 'a-two',
        prefix: a2.row.prefix,
        owner: 'sub_account',
        requests: 2,
        by_status: { '2xx': 1, '3xx': 0, '4xx': 1, '5xx': 0 },
        days: [{ date: today, requests: 2, units: { requests: 1 } }],
        units: { requests: 1 },
      },
    ],
    'oldest key first (the parent key was made first); the idle key and B’s key are not there',
  )
  t.notOk(
    body.data.some((e: { key_id: string }) => e.key_id === aIdle.row.id),
    'a key without requests is left out',
  )
  const sum = body.data.reduce((n: number, e: { requests: number }) => n + e.requests, 0)
  const account = await gw.call(P.apiKey, {
    method: 'GET',
    url: '/v1/sub-accounts/usage',
    query: { sub_account_id: A.id },
  })
  t.equal(sum, account.json().data[0].requests, "the keys' requests add up to the sub-account's")

  const ofB = (await report(P.apiKey, B.id)).json()
  t.same(
    ofB.data.map((e: { name: string; requests: number }) => [e.name, e.requests]),
    [['b-one', 1]],
  )
})

t.test('paged by key; a range without requests; bad ranges and cursors are 400s', async (t) => {
  const first = (await report(P.apiKey, A.id, '?limit=2')).json()
  t.equal(first.data.length, 2)
  t.type(first.next_cursor, 'string')
  const second = (await report(P.apiKey, A.id, `?limit=2&cursor=${first.next_cursor}`)).json()
  t.same(
    second.data.map((e: { name: string }) => e.name),
    ['a-two'],
    'the second page goes on after the last key',
  )
  t.equal(second.next_cursor, null)
  const otherSub = await report(P.apiKey, B.id, `?cursor=${first.next_cursor}`)
  t.equal(otherSub.statusCode, 400, "a cursor of another sub-account's usage is refused")
  t.equal(problemOf(otherSub).errors?.[0]?.path, '/querystring/cursor')

  const empty = (await report(P.apiKey, A.id, '?from=2020-01-01&to=2020-01-31')).json()
  t.same(empty, { from: '2020-01-01', to: '2020-01-31', sub_account_id: A.id, data: [], next_cursor: null })

  const backwards = await report(P.apiKey, A.id, '?from=2020-02-01&to=2020-01-01')
  t.equal(backwards.statusCode, 400)
  t.match(problemOf(backwards).errors?.[0]?.message, 'must not be after to')
  const unknownParam = await report(P.apiKey, A.id, '?group_by=day')
  t.equal(unknownParam.statusCode, 400, 'an unknown parameter is refused')
})

t.test("another parent's sub-account, or no sub-account, is 404; sub-account keys are refused", async (t) => {
  t.equal((await report(Q.apiKey, A.id)).statusCode, 404, "another parent's")
  t.equal((await report(P.apiKey, C.id)).statusCode, 404, "P asking for Q's")
  t.equal((await report(P.apiKey, 'not-a-uuid')).statusCode, 404)
  t.equal((await report(a1.apiKey, A.id)).statusCode, 403, "a sub-account's key")
})

t.test('the usage report names its sub-accounts only with include=name', async (t) => {
  const plain = (await gw.call(P.apiKey, { method: 'GET', url: '/v1/sub-accounts/usage' })).json()
  t.equal(plain.data.length, 2)
  t.notOk(
    plain.data.some((e: object) => 'name' in e),
    'the default shape is unchanged',
  )
  const named = (
    await gw.call(P.apiKey, { method: 'GET', url: '/v1/sub-accounts/usage', query: { include: 'name' } })
  ).json()
  t.same(
    named.data.map((e: { name: string; external_id: string | null }) => [e.name, e.external_id]),
    [
      ['Shop A', 'shop-a'],
      ['Shop B', null],
    ],
  )
  const bad = await gw.call(P.apiKey, { method: 'GET', url: '/v1/sub-accounts/usage', query: { include: 'names' } })
  t.equal(bad.statusCode, 400)
  t.equal(problemOf(bad).errors?.[0]?.path, '/querystring/include')
})
