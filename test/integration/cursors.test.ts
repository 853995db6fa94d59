// Paging cursors are opaque and only the API's own are taken (docs/api.md, Paging): signed with the
// deployment's secret, which every replica shares (it lives in Postgres), and bound to the list and
// the parent they came from. Over real sockets, on two replicas of one deployment.
import t, { type Test } from 'tap'
import { startReplicas, type TestGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'

const [a, b] = (await startReplicas(t, 2, { redis: false })) as [TestGateway, TestGateway]
const parent = await a.createParent()
const stranger = await a.createParent()

async function get(url: string, key: string, path: string) {
  const res = await callAs(url, key, { method: 'GET', path })
  return { status: res.status, body: res.json() }
}

async function create(key: string, name: string): Promise<string> {
  const res = await callAs(a.url, key, { method: 'POST', path: '/v1/sub-accounts', acting: 'self', json: { name } })
  if (res.status !== 201) throw new Error(`setup: ${res.status} ${res.body}`)
  return res.json().id as string
}

const ids = [await create(parent.apiKey, 's0'), await create(parent.apiKey, 's1'), await create(parent.apiKey, 's2')]
await create(stranger.apiKey, 'theirs0')
await create(stranger.apiKey, 'theirs1')
for (const name of ['k0', 'k1']) {
  const res = await callAs(a.url, parent.apiKey, {
    method: 'POST',
    path: `/v1/sub-accounts/${ids[0]}/api-keys`,
    acting: 'self',
    json: { name, scopes: ['tracking:read'] },
  })
  if (res.status !== 201) throw new Error(`setup: ${res.status} ${res.body}`)
}

const firstPage = await get(a.url, parent.apiKey, '/v1/sub-accounts?limit=1')
const issued = firstPage.body.next_cursor as string
const strangerCursor = (await get(a.url, stranger.apiKey, '/v1/sub-accounts?limit=1')).body.next_cursor as string
const keysCursor = (await get(a.url, parent.apiKey, `/v1/sub-accounts/${ids[0]}/api-keys?limit=1`)).body
  .next_cursor as string

function refusedAsNotIssued(t: Test, res: { status: number; body: Record<string, unknown> }, what: string) {
  t.equal(res.status, 400, `${what}: 400`)
  t.equal(res.body.code, 'validation_failed', `${what}: validation_failed`)
  t.match(res.body.errors, [{ path: '/querystring/cursor', message: 'is not a cursor issued by this API' }], what)
}

t.test('a cursor the API issued works, on the replica that issued it and on another', async (t) => {
  t.type(issued, 'string')
  for (const [name, url] of [
    ['A', a.url],
    ['B', b.url],
  ] as const) {
    const res = await get(url, parent.apiKey, `/v1/sub-accounts?limit=5&cursor=${issued}`)
    t.equal(res.status, 200, `replica ${name}`)
    t.same(
      res.body.data.map((s: { id: string }) => s.id),
      ids.slice(1),
      `replica ${name} resumes after the first`,
    )
  }
  const keys = await get(b.url, parent.apiKey, `/v1/sub-accounts/${ids[0]}/api-keys?limit=5&cursor=${keysCursor}`)
  t.equal(keys.status, 200)
  t.equal(keys.body.data.length, 1, 'the keys list resumes on B too')
})

t.test('a forged cursor is 400 validation_failed', async (t) => {
  const base64url = (text: string) => Buffer.from(text).toString('base64url')
  for (const forged of [
    'czox', // base64url of `s:1`, what the API used to issue
    base64url('s:2'),
    base64url('s:99999'),
    'A'.repeat(32), // the right length, position 0 and a zero tag
    `AAAAAAAAAAE${issued.slice(11)}`, // another position under the issued cursor's tag
    `${issued.slice(0, 31)}${issued.endsWith('A') ? 'B' : 'A'}`, // one character of the tag changed
  ]) {
    refusedAsNotIssued(t, await get(a.url, parent.apiKey, `/v1/sub-accounts?cursor=${forged}`), forged)
  }
})

t.test('a truncated or padded cursor is 400 validation_failed', async (t) => {
  for (const broken of [issued.slice(0, -1), issued.slice(0, 16), `${issued}A`, `${issued}=`, `${issued}%3D%3D`]) {
    refusedAsNotIssued(t, await get(a.url, parent.apiKey, `/v1/sub-accounts?cursor=${broken}`), broken)
  }
})

t.test("another parent's cursor is 400, and shows nothing of either parent", async (t) => {
  const res = await get(a.url, parent.apiKey, `/v1/sub-accounts?cursor=${strangerCursor}`)
  refusedAsNotIssued(t, res, "the stranger's cursor")
  t.notMatch(JSON.stringify(res.body), /theirs|s1|s2/, 'no sub-account named in the answer')
  refusedAsNotIssued(
    t,
    await get(a.url, stranger.apiKey, `/v1/sub-accounts?cursor=${issued}`),
    "the parent's, used by the stranger",
  )
})

t.test("another list's cursor is 400", async (t) => {
  refusedAsNotIssued(
    t,
    await get(a.url, parent.apiKey, `/v1/sub-accounts?cursor=${keysCursor}`),
    'keys cursor on sub-accounts',
  )
  refusedAsNotIssued(
    t,
    await get(a.url, parent.apiKey, `/v1/sub-accounts/${ids[0]}/api-keys?cursor=${issued}`),
    'sub-accounts cursor on keys',
  )
  refusedAsNotIssued(
    t,
    await get(a.url, parent.apiKey, `/v1/sub-accounts/${ids[1]}/api-keys?cursor=${keysCursor}`),
    "one sub-account's keys cursor on another's",
  )
  refusedAsNotIssued(
    t,
    await get(a.url, parent.apiKey, `/v1/sub-accounts/usage?cursor=${issued}`),
    'on the usage report',
  )
})

t.test('the secret is made once, by the migrations, and kept in Postgres', async (t) => {
  const rows = await a.sql<{ n: number; bytes: number }[]>`
    select count(*)::int as n, min(octet_length(value))::int as bytes from gateway_secrets where name = 'cursor'`
  t.same(rows[0], { n: 1, bytes: 32 })
})
