// A replica runs at most two key imports of one parent at once, and four in all
// (src/management/key-import-places.ts): each holds a set of the body's digests on the heap and a
// spool on disk while it is read, so that without a bound one parent's imports in parallel took
// the replica's heap from every parent on it. A refused import is answered 429 at once, nothing
// read or imported; a place is given back however its import ends, and a client that stops
// reading its answer is let go (keyImportAnswerStallMs), or it would hold its place for good.
import { randomBytes } from 'node:crypto'
import { request as httpRequest, type IncomingMessage } from 'node:http'
import t from 'tap'
import { KEY_IMPORTS_AT_ONCE, KEY_IMPORTS_PER_ACCOUNT } from '../../src/management/key-import-places.js'
import { startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { until } from '../helpers/poll.js'
import { startUpstream } from '../helpers/upstream.js'

const upstream = await startUpstream(t)
// A client that stops reading the answer is let go after this (30 s in production).
const gateway = await startGateway(t, { upstreamUrl: upstream.url, keyImportAnswerStallMs: 1_000 })
const sql = gateway.database.sql

/** A parent with one sub-account, and a line of a fresh key for it. */
async function parentWithSub() {
  const parent = await gateway.createParent()
  const sub = (
    await gateway.call(parent.apiKey, {
      method: 'POST',
      url: '/v1/sub-accounts',
      acting: 'self',
      body: { name: 'placed', external_id: `placed-${randomBytes(4).toString('hex')}` },
    })
  ).json().id as string
  const line = () =>
    `${JSON.stringify({ sub_account_id: sub, name: 'k', scopes: ['orders:read'], key: `sk_${randomBytes(18).toString('base64url')}` })}\n`
  return { apiKey: parent.apiKey, line }
}

const countKeys = async () =>
  (await sql`select count(*)::int as n from api_keys where origin = 'imported'`)[0]!.n as number

/** An import whose body stays open until the test ends it: its place is held meanwhile. */
function openImport(apiKey: string) {
  const req = httpRequest(new URL('/v1/sub-accounts/api-keys/imports', gateway.url), {
    method: 'POST',
    headers: {
      authorization: `Bearer ${apiKey}`,
      'x-service-acting-tenant': 'self',
      'content-type': 'application/x-ndjson',
    },
  })
  req.on('error', () => {}) // destroyed on purpose
  const answered = new Promise<IncomingMessage>((resolve) => req.once('response', resolve))
  return { req, answered }
}

const importNow = (apiKey: string, body: string) =>
  callAs(gateway.url, apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts/api-keys/imports',
    acting: 'self',
    headers: [['Content-Type', 'application/x-ndjson']],
    body,
  })

/** Whether a new import of `apiKey` is refused now (a probe that imports its line when let in). */
const refused = async (apiKey: string, line: string) => (await importNow(apiKey, line)).status === 429

t.test('one parent holds two places, the replica four; a place comes back when its import ends', async (t) => {
  t.equal(KEY_IMPORTS_PER_ACCOUNT, 2)
  t.equal(KEY_IMPORTS_AT_ONCE, 4)
  const a = await parentWithSub()
  const b = await parentWithSub()
  const c = await parentWithSub()
  const aOpen = [openImport(a.apiKey), openImport(a.apiKey)]
  for (const { req } of aOpen) req.write(a.line())
  t.ok(await until(10_000, () => refused(a.apiKey, a.line())), "a parent's third import is refused")
  const before = await countKeys()
  const third = await importNow(a.apiKey, a.line())
  t.equal(third.status, 429)
  t.equal(third.json().code, 'too_many_concurrent_requests')
  t.equal(third.headers['retry-after'], '1')
  t.match(third.json().detail, /this account already has 2 key imports under way/)
  t.equal(await countKeys(), before, 'nothing imported')

  const bOpen = [openImport(b.apiKey), openImport(b.apiKey)]
  for (const { req } of bOpen) req.write(b.line())
  t.ok(await until(10_000, () => refused(c.apiKey, c.line())), 'a fifth import, of another parent, is refused')
  t.match((await importNow(c.apiKey, c.line())).json().detail, /this replica already runs 4 key imports/)

  // One of a's ends: its place is free once its answer is done.
  aOpen[0]!.req.end(a.line())
  const done = await aOpen[0]!.answered
  t.equal(done.statusCode, 200)
  done.resume()
  t.ok(await until(10_000, async () => (await importNow(c.apiKey, c.line())).status === 200), 'c gets its place')

  // The others' clients go away mid-body: their places come back too.
  for (const { req } of [aOpen[1]!, ...bOpen]) req.destroy()
  t.ok(
    await until(10_000, async () => {
      const answers = await Promise.all([importNow(a.apiKey, a.line()), importNow(a.apiKey, a.line())])
      return answers.every((r) => r.status === 200)
    }),
    'a holds two places again',
  )
})

t.test('a client that stops reading the answer is let go, and its place comes back', async (t) => {
  const a = await parentWithSub()
  // 100,000 lines invalid as read (a tgw_ value that is no gateway key): no store work, and an
  // answer of about 25 MB, more than the loopback sockets buffer.
  const invalid = `${JSON.stringify({ external_id: 'x', name: 'k', scopes: ['orders:read'], key: `tgw_${'x'.repeat(30)}` })}\n`
  const stalled = openImport(a.apiKey)
  stalled.req.end(invalid.repeat(100_000))
  const res = await stalled.answered
  t.equal(res.statusCode, 200)
  res.pause() // and never read
  const held = openImport(a.apiKey)
  held.req.write(a.line())
  t.ok(await until(10_000, () => refused(a.apiKey, a.line())), 'both places held')
  t.ok(await until(20_000, async () => !(await refused(a.apiKey, a.line()))), "the stalled answer's place is back")
  held.req.destroy()
  res.destroy()
})

t.test("the replica's spools share a budget: an import past it is a 503, the budget back after", async (t) => {
  // A budget of 200 KiB stands for the chart's 128Mi tmpDir, past which the pod is evicted.
  const small = await startGateway(t, { upstreamUrl: upstream.url, keyImportSpoolBytes: 200 * 1024 })
  const parent = await small.createParent()
  const sub = (
    await small.call(parent.apiKey, {
      method: 'POST',
      url: '/v1/sub-accounts',
      acting: 'self',
      body: { name: 'budget', external_id: 'budget' },
    })
  ).json().id as string
  const line = () =>
    `${JSON.stringify({ sub_account_id: sub, name: 'k', scopes: ['orders:read'], key: `sk_${randomBytes(18).toString('base64url')}` })}\n`
  const send = (n: number) =>
    callAs(small.url, parent.apiKey, {
      method: 'POST',
      path: '/v1/sub-accounts/api-keys/imports',
      acting: 'self',
      headers: [['Content-Type', 'application/x-ndjson']],
      body: Array.from({ length: n }, line).join(''),
    })
  const imported = async () =>
    (await small.database.sql`select count(*)::int as n from api_keys where origin = 'imported'`)[0]!.n as number
  const over = await send(3_000) // about 450 KB of spool
  t.equal(over.status, 503)
  t.equal(over.json().code, 'spool_unavailable')
  t.match(over.json().detail, /full: nothing was imported/)
  t.equal(await imported(), 0, 'nothing imported')
  const under = await send(100)
  t.equal(under.status, 200, 'the budget the refused import took is back')
  t.equal(await imported(), 100)
})
