// Key expiry (docs/credentials.md, key lifecycle; docs/api.md): a key minted with `expires_at` is
// shown with it everywhere, works until then and is refused from then on with 401 key_expired, on
// every replica, without any message on the invalidation bus: the cached record carries the
// instant. Two replicas (A and B) share Postgres and a Redis prefix, in front of a real upstream;
// they keep records in-process for a minute, so only the record's own expiry can explain a refusal.
import t, { type Test } from 'tap'
import { recentAdmissions, type TestGateway, startReplicas } from '../helpers/gateway.js'
import { callAs, type RawResponse } from '../helpers/http.js'
import { eventually, sleep } from '../helpers/poll.js'
import { checkProblem, problemOf } from '../helpers/problems.js'
import { redisClient } from '../helpers/redis.js'
import { startUpstream } from '../helpers/upstream.js'

const SLOW_LOCAL_EXPIRY = { localTtlMs: 60_000, negativeTtlMs: 60_000, reinvalidateAfterMs: 60_000 }
const EXPIRED_CHALLENGE = 'Bearer error="invalid_token", error_description="the key has expired"'

const upstream = await startUpstream(t)
const [a, b] = (await startReplicas(t, 2, { upstreamUrl: upstream.url, cacheTimings: SLOW_LOCAL_EXPIRY })) as [
  TestGateway,
  TestGateway,
]
const sql = a.database.sql
const parent = await a.createParent()
const sub = (
  await a.call(parent.apiKey, { method: 'POST', url: '/v1/sub-accounts', body: { name: 'expiring' } })
).json()
const keysUrl = `/v1/sub-accounts/${sub.id}/api-keys`

interface Key {
  id: string
  status: string
  expires_at: string | null
  rolled_from: string | null
  api_key: string
  client_secret: string
}

const mint = (body: Record<string, unknown>) =>
  a.call(parent.apiKey, {
    method: 'POST',
    url: keysUrl,
    acting: 'self',
    body: { name: 'k', scopes: ['x:read'], ...body },
  })

async function minted(t: Test, body: Record<string, unknown>): Promise<Key> {
  const res = await mint(body)
  t.equal(res.statusCode, 201, `minted with ${JSON.stringify(body)}: ${res.body.slice(0, 300)}`)
  return res.json()
}

const getKey = (id: string) => a.call(parent.apiKey, { method: 'GET', url: `${keysUrl}/${id}` })
const listed = async (id: string) =>
  (await a.call(parent.apiKey, { method: 'GET', url: `${keysUrl}?limit=100` }))
    .json()
    .data.find((k: Key) => k.id === id)
const proxied = (gw: TestGateway, apiKey: string) => callAs(gw.url, apiKey, { path: '/v1/orders' })
const countKeys = async () => (await sql`select count(*)::int as n from api_keys`)[0]!.n as number
const iso = (ms: number) => new Date(ms).toISOString()

t.test('minted with expires_at: stored, and shown by the mint, the list and the get', async (t) => {
  const at = Date.now() + 3_600_000
  // An offset is read as the instant it names.
  const local = new Date(at + 5.5 * 3_600_000).toISOString().replace('Z', '+05:30')
  const key = await minted(t, { expires_at: local })
  t.equal(key.expires_at, iso(at), 'the instant, in UTC')
  t.equal(key.status, 'active')
  t.equal(key.rolled_from, null)
  const [row] = await sql`select expires_at from api_keys where id = ${key.id}`
  t.equal((row!.expires_at as Date).getTime(), at, 'stored')
  const got = await getKey(key.id)
  t.equal(got.statusCode, 200)
  t.match(got.json(), { id: key.id, status: 'active', expires_at: iso(at), rolled_from: null })
  t.match(await listed(key.id), { status: 'active', expires_at: iso(at), rolled_from: null })
  t.equal((await proxied(a, key.api_key)).status, 200, 'it works before its expiry')
})

t.test('accepted spellings of expires_at', async (t) => {
  const soon = Date.now() + 3_600_000
  const second = Math.floor(soon / 1000) * 1000
  for (const [spelling, want] of [
    [iso(second).replace('.000Z', 'Z'), iso(second)],
    [iso(second).replace('T', 't').replace('.000Z', 'z'), iso(second)],
    [iso(soon).replace('Z', '123Z'), iso(soon)],
    [iso(second).replace('.000Z', '-01:00'), iso(second + 3_600_000)],
  ] as const) {
    const key = await minted(t, { expires_at: spelling })
    t.equal(key.expires_at, want, spelling)
  }
  const nearlyTenYears = new Date()
  nearlyTenYears.setUTCFullYear(nearlyTenYears.getUTCFullYear() + 10)
  const late = await minted(t, { expires_at: iso(nearlyTenYears.getTime() - 60_000) })
  t.equal(late.expires_at, iso(nearlyTenYears.getTime() - 60_000), 'just under 10 years ahead')
  t.equal((await minted(t, { expires_at: null })).expires_at, null, 'null: never')
  t.equal((await minted(t, {})).expires_at, null, 'absent: never')
})

t.test('refused expires_at: 400 validation_failed naming /body/expires_at, and nothing changes', async (t) => {
  const before = await countKeys()
  const year = new Date().getUTCFullYear() + 1
  const tenYearsAndADay = new Date()
  tenYearsAndADay.setUTCFullYear(tenYearsAndADay.getUTCFullYear() + 10)
  for (const value of [
    iso(Date.now() - 60_000),
    iso(Date.now() - 1),
    iso(tenYearsAndADay.getTime() + 86_400_000),
    '9999-12-31T23:59:59Z',
    `${year}-01-31`,
    `${year}-01-31T12:00:00`,
    `${year}-01-31 12:00:00Z`,
    `${year}-02-30T12:00:00Z`,
    `${year}-13-01T12:00:00Z`,
    `${year}-01-31T24:00:00Z`,
    `${year}-06-30T23:59:60Z`,
    `${year}-01-31T12:00:00+0530`,
    `${year}-01-31T12:00Z`,
    'tomorrow',
    '',
    Date.now() + 3_600_000,
    true,
    {},
    [],
  ]) {
    const res = await mint({ expires_at: value })
    t.equal(res.statusCode, 400, `${JSON.stringify(value)}: 400`)
    const problem = problemOf(res)
    t.equal(problem.code, 'validation_failed')
    t.ok(
      problem.errors?.some((e) => e.path === '/body/expires_at'),
      `${JSON.stringify(value)} names /body/expires_at: ${res.body}`,
    )
  }
  t.equal(await countKeys(), before, 'no key was minted')
})

t.test('past expires_at: 401 key_expired, status expired, and revoking it still works', async (t) => {
  const expiresAt = Date.now() + 1_500
  const key = await minted(t, { expires_at: iso(expiresAt) })
  t.equal((await proxied(a, key.api_key)).status, 200, 'works before')
  await sleep(expiresAt - Date.now() + 10)
  const res = await proxied(a, key.api_key)
  checkProblem(t, res, 401, 'key_expired', 'after expires_at')
  t.equal(res.headers['www-authenticate'], EXPIRED_CHALLENGE)
  t.equal(res.json().detail, 'the key has expired')
  t.equal(upstream.received.filter((r) => r.headers.authorization === `Bearer ${key.api_key}`).length, 0)
  t.match((await getKey(key.id)).json(), { status: 'expired', revoked_at: null, expires_at: iso(expiresAt) })
  t.match(await listed(key.id), { status: 'expired' })
  const [row] = await sql`select status from api_keys where id = ${key.id}`
  t.equal(row!.status, 'active', 'the table keeps it active: expired is computed when shown')
  const revoked = await a.call(parent.apiKey, { method: 'POST', url: `${keysUrl}/${key.id}/revoke`, acting: 'self' })
  t.match(revoked.json(), { status: 'revoked', expires_at: iso(expiresAt) })
  checkProblem(t, await proxied(a, key.api_key), 401, 'unauthenticated', 'revoked after expiring')
})

t.test('GET one key: without secrets; 404 for a key not of this sub-account', async (t) => {
  const key = await minted(t, { name: 'one' })
  const res = await getKey(key.id)
  t.equal(res.statusCode, 200)
  t.same(Object.keys(res.json()).sort(), [
    'created_at',
    'expires_at',
    'id',
    'ip_allowlist',
    'last_used_at',
    'leaked',
    'name',
    'origin',
    'prefix',
    'revoked_at',
    'rolled_from',
    'scopes',
    'status',
  ])
  t.notOk(res.body.includes(key.api_key) || res.body.includes(key.client_secret), 'no secret')
  t.equal((await getKey(key.id.toUpperCase())).json().id, key.id, 'an upper-case id names it too')
  const otherSub = (
    await a.call(parent.apiKey, { method: 'POST', url: '/v1/sub-accounts', acting: 'self', body: { name: 'o' } })
  ).json()
  const stranger = await a.createParent()
  for (const [who, url] of [
    [parent.apiKey, `/v1/sub-accounts/${otherSub.id}/api-keys/${key.id}`],
    [parent.apiKey, `${keysUrl}/00000000-0000-4000-8000-000000000000`],
    [parent.apiKey, `${keysUrl}/not-a-key`],
    [stranger.apiKey, `${keysUrl}/${key.id}`],
  ] as const) {
    const missing = await a.call(who, { method: 'GET', url })
    t.equal(missing.statusCode, 404, url)
    t.equal(problemOf(missing).code, 'not_found')
  }
})

t.test('both replicas refuse an expired key within 1 s of its expiry, without any message', async (t) => {
  const channel = `${a.redisKeyPrefix}invalidate`
  const listener = redisClient(t)
  const messages: string[] = []
  listener.on('message', (_channel: string, message: string) => messages.push(message))
  await listener.subscribe(channel)

  const expiresAt = Date.now() + 2_500
  const key = await minted(t, { expires_at: iso(expiresAt) })
  // Both replicas know the key, and the proxy admits it from its memory of the last second.
  for (const gw of [a, b]) {
    const before = await recentAdmissions(gw)
    for (let i = 0; i < 3; i++) t.equal((await proxied(gw, key.api_key)).status, 200, 'admitted before its expiry')
    t.ok((await recentAdmissions(gw)) > before, 'from the memory of recent admissions too')
  }
  await sleep(100)
  const heard = messages.length

  interface Probe {
    sentAt: number
    answeredAt: number
    res: RawResponse
  }
  const probes = new Map<TestGateway, Probe[]>([
    [a, []],
    [b, []],
  ])
  const probe = async (gw: TestGateway) => {
    const sentAt = Date.now()
    const res = await proxied(gw, key.api_key)
    probes.get(gw)!.push({ sentAt, answeredAt: Date.now(), res })
    return res.status === 401
  }
  const [tookA, tookB] = await Promise.all(
    [a, b].map((gw) => eventually(expiresAt - Date.now() + 5_000, () => probe(gw), 10)),
  )
  t.not(tookA, null, 'A refuses it')
  t.not(tookB, null, 'B refuses it')

  for (const [gw, name] of [
    [a, 'A'],
    [b, 'B'],
  ] as const) {
    const all = probes.get(gw)!
    const firstRefusal = all.find((p) => p.res.status === 401)!
    checkProblem(t, firstRefusal.res, 401, 'key_expired', `${name}: refused`)
    t.equal(firstRefusal.res.headers['www-authenticate'], EXPIRED_CHALLENGE)
    t.ok(
      firstRefusal.answeredAt <= expiresAt + 1_000,
      `${name}: refused ${firstRefusal.answeredAt - expiresAt} ms after the expiry (at most 1,000)`,
    )
    t.same(
      all.filter((p) => p.answeredAt < expiresAt && p.res.status !== 200).map((p) => p.res.status),
      [],
      `${name}: nothing refused before the expiry`,
    )
    // Sent after the expiry: refused, even when the same request was admitted a moment before.
    t.same(
      all.filter((p) => p.sentAt >= expiresAt && p.res.status !== 401).map((p) => p.sentAt - expiresAt),
      [],
      `${name}: nothing admitted once expired (${all.filter((p) => p.sentAt < expiresAt).length} probes before)`,
    )
    t.ok(
      all.some((p) => p.sentAt < expiresAt && p.res.status === 200),
      `${name}: the probes began while the key still worked`,
    )
    checkProblem(t, await proxied(gw, key.api_key), 401, 'key_expired', `${name}: and still refused`)
  }
  t.same(messages.slice(heard), [], 'no invalidation was published')
})
