// Rolling a key (docs/credentials.md, key lifecycle; docs/api.md): a new key like the old one, the
// old one kept working for an overlap (or revoked at once with 0), both in one transaction, and
// every replica told. Two replicas (A and B) share Postgres and a Redis prefix in front of a real
// upstream; they keep records in-process for a minute and send each invalidation once, so that
// within the second the tests allow only the roll's own message can change B's answer.
import t, { type Test } from 'tap'
import { startReplicas, type TestGateway } from '../helpers/gateway.js'
import { callAs, type RawResponse } from '../helpers/http.js'
import { eventually, sleep } from '../helpers/poll.js'
import { checkProblem, problemOf } from '../helpers/problems.js'
import { redisClient, untilSubscribed } from '../helpers/redis.js'
import { startUpstream } from '../helpers/upstream.js'

const SLOW_LOCAL_EXPIRY = { localTtlMs: 60_000, negativeTtlMs: 60_000, reinvalidateAfterMs: 60_000 }
const DAY_MS = 86_400_000

const upstream = await startUpstream(t)
const [a, b] = (await startReplicas(t, 2, { upstreamUrl: upstream.url, cacheTimings: SLOW_LOCAL_EXPIRY })) as [
  TestGateway,
  TestGateway,
]
const sql = a.database.sql
const parent = await a.createParent()

// Both replicas must be subscribed before a change they are to hear of.
const redis = redisClient(t)
await untilSubscribed(redis, a.redisKeyPrefix!, 2)

interface Key {
  id: string
  name: string
  scopes: string[]
  status: string
  created_at: string
  expires_at: string | null
  rolled_from: string | null
  revoked_at?: string | null
  api_key: string
  client_secret: string
}

const manage = (method: 'GET' | 'POST', url: string, body?: unknown) =>
  a.call(parent.apiKey, { method, url: `/v1/sub-accounts${url}`, acting: 'self', body })

async function newSub(): Promise<string> {
  return (await manage('POST', '', { name: 'rolling' })).json().id
}

async function mint(t: Test, subId: string, body: Record<string, unknown> = {}): Promise<Key> {
  const res = await manage('POST', `/${subId}/api-keys`, {
    name: 'ci',
    scopes: ['orders:read', 'orders:write'],
    ...body,
  })
  t.equal(res.statusCode, 201, `minted: ${res.body.slice(0, 200)}`)
  return res.json()
}

const roll = (subId: string, keyId: string, body?: unknown) => manage('POST', `/${subId}/api-keys/${keyId}/roll`, body)
const getKey = async (subId: string, keyId: string): Promise<Key> =>
  (await manage('GET', `/${subId}/api-keys/${keyId}`)).json()
const proxied = (gw: TestGateway, apiKey: string) => callAs(gw.url, apiKey, { path: '/v1/orders' })
const countKeys = async () => (await sql`select count(*)::int as n from api_keys`)[0]!.n as number
const ms = (text: string | null | undefined) => (text == null ? null : Date.parse(text))

t.test('a roll: 201, Location, no-store, a new key like the old one; the old one kept a day', async (t) => {
  const subId = await newSub()
  const expiresAt = new Date(Date.now() + 30 * DAY_MS).toISOString()
  const old = await mint(t, subId, { expires_at: expiresAt })
  const before = Date.now()
  const res = await roll(subId, old.id, { expires_in_seconds: 3600 })
  const after = Date.now()
  t.equal(res.statusCode, 201, res.body.slice(0, 300))
  t.equal(res.headers['cache-control'], 'no-store')
  const rolled: Key = res.json()
  t.equal(res.headers.location, `/v1/sub-accounts/${subId}/api-keys/${rolled.id}`, 'Location names the new key')
  t.same(Object.keys(rolled).sort(), [
    'api_key',
    'client_secret',
    'created_at',
    'expires_at',
    'id',
    'ip_allowlist',
    'name',
    'origin',
    'prefix',
    'rolled_from',
    'scopes',
    'status',
  ])
  t.not(rolled.id, old.id, 'a new key')
  t.match(rolled, { name: old.name, scopes: old.scopes, expires_at: expiresAt, rolled_from: old.id, status: 'active' })
  t.match(rolled.api_key, /^tgw_[0-9A-Za-z]{49}$/)
  t.match(rolled.client_secret, /^tgws_[0-9A-Za-z]{49}$/)
  t.not(rolled.api_key, old.api_key)
  t.equal(rolled.api_key.slice(0, 12), (rolled as unknown as { prefix: string }).prefix)

  const oldNow = await getKey(subId, old.id)
  t.equal(oldNow.status, 'active', 'the old key is still active')
  t.equal(oldNow.revoked_at, null)
  const oldExpiry = ms(oldNow.expires_at)!
  t.ok(
    oldExpiry >= before + 3_600_000 - 1 && oldExpiry <= after + 3_600_000,
    `the old key now expires in an hour (${oldNow.expires_at})`,
  )
  t.match(await getKey(subId, rolled.id), { id: rolled.id, rolled_from: old.id, expires_at: expiresAt })
  const [stored] = await sql`select rolled_from from api_keys where id = ${rolled.id}`
  t.equal(stored!.rolled_from, old.id, 'rolled_from is stored')

  for (const gw of [a, b]) {
    t.equal((await proxied(gw, rolled.api_key)).status, 200, 'the new key works')
    t.equal((await proxied(gw, old.api_key)).status, 200, 'the old key works too')
  }
})

t.test('the overlap: a day by default, and never later than the old key already expired', async (t) => {
  const subId = await newSub()
  for (const [what, body, contentType] of [
    ['no body at all', undefined, undefined],
    ['no body, a form content type', undefined, 'application/x-www-form-urlencoded'],
    ['an empty object', {}, undefined],
  ] as const) {
    const old = await mint(t, subId)
    const before = Date.now()
    const res = await a.call(parent.apiKey, {
      method: 'POST',
      url: `/v1/sub-accounts/${subId}/api-keys/${old.id}/roll`,
      acting: 'self',
      ...(body === undefined ? {} : { body }),
      ...(contentType === undefined ? {} : { headers: { 'content-type': contentType } }),
    })
    t.equal(res.statusCode, 201, `${what}: ${res.body.slice(0, 200)}`)
    t.equal(res.json().expires_at, null, `${what}: the new key never expires, as the old one did not`)
    const oldExpiry = ms((await getKey(subId, old.id)).expires_at)!
    t.ok(oldExpiry >= before + DAY_MS - 1 && oldExpiry <= Date.now() + DAY_MS, `${what}: the old key has a day left`)
  }

  const soon = new Date(Date.now() + 600_000).toISOString()
  const early = await mint(t, subId, { expires_at: soon })
  const res = await roll(subId, early.id, { expires_in_seconds: 2_592_000 })
  t.equal(res.statusCode, 201)
  t.equal(res.json().expires_at, soon, 'the new key keeps the old expiry')
  t.equal((await getKey(subId, early.id)).expires_at, soon, 'the old key keeps its earlier expiry')
})

t.test('the old key works until its new expiry, then 401 key_expired on both replicas', async (t) => {
  const subId = await newSub()
  const old = await mint(t, subId)
  // B knows the old key as never expiring: only the roll's message can tell it otherwise.
  t.equal((await proxied(b, old.api_key)).status, 200, 'B knows the old key')
  const res = await roll(subId, old.id, { expires_in_seconds: 2 })
  t.equal(res.statusCode, 201)
  const rolled: Key = res.json()
  const expiresAt = ms((await getKey(subId, old.id)).expires_at)!
  for (const gw of [a, b]) {
    const answer = await proxied(gw, old.api_key)
    if (Date.now() < expiresAt - 50) t.equal(answer.status, 200, 'the old key still works meanwhile')
  }
  for (const [gw, name] of [
    [a, 'A'],
    [b, 'B'],
  ] as const) {
    let last: RawResponse | null = null
    const took = await eventually(expiresAt - Date.now() + 5_000, async () => {
      last = await proxied(gw, old.api_key)
      return last.status === 401
    })
    t.not(took, null, `${name} refuses the old key`)
    t.ok(Date.now() <= expiresAt + 1_000, `${name}: within 1 s of its expiry (${Date.now() - expiresAt} ms)`)
    checkProblem(t, last!, 401, 'key_expired', `${name}: the old key`)
    t.equal((await proxied(gw, rolled.api_key)).status, 200, `${name}: the new key still works`)
  }
  t.equal((await getKey(subId, old.id)).status, 'expired')
})

t.test('a roll with 0 revokes the old key at once, and the other replica follows within 1 s', async (t) => {
  const subId = await newSub()
  const old = await mint(t, subId)
  for (const gw of [a, b]) t.equal((await proxied(gw, old.api_key)).status, 200, 'known to both replicas')
  const res = await roll(subId, old.id, { expires_in_seconds: 0 })
  t.equal(res.statusCode, 201)
  const rolled: Key = res.json()
  const oldNow = await getKey(subId, old.id)
  t.equal(oldNow.status, 'revoked')
  t.ok(oldNow.revoked_at, 'revoked_at is set')
  t.equal(oldNow.expires_at, oldNow.revoked_at, 'and it expired then too')
  checkProblem(t, await proxied(a, old.api_key), 401, 'unauthenticated', 'A: the old key, at once')
  let last: RawResponse | null = null
  const took = await eventually(1_000, async () => {
    last = await proxied(b, old.api_key)
    return last.status === 401
  })
  t.not(took, null, `B refuses the old key within 1 s (last: ${last === null ? 'none' : (last as RawResponse).status})`)
  checkProblem(t, last!, 401, 'unauthenticated', 'B: the old key')
  for (const gw of [a, b]) t.equal((await proxied(gw, rolled.api_key)).status, 200, 'the new key works')
})

t.test('409 key_not_active: a revoked key, an expired key; nothing changes', async (t) => {
  const subId = await newSub()
  const revoked = await mint(t, subId)
  t.equal((await manage('POST', `/${subId}/api-keys/${revoked.id}/revoke`)).statusCode, 200)
  const expiring = await mint(t, subId, { expires_at: new Date(Date.now() + 1_000).toISOString() })
  const rolledAway = await mint(t, subId)
  t.equal((await roll(subId, rolledAway.id, { expires_in_seconds: 0 })).statusCode, 201, 'rolled with 0')
  await sleep(Math.max(0, Date.parse(expiring.expires_at!) - Date.now() + 10))
  const before = await countKeys()
  const rows = await sql`select id, status, expires_at, revoked_at from api_keys order by seq`
  for (const [what, key] of [
    ['revoked', revoked],
    ['expired', expiring],
    ['revoked by a roll', rolledAway],
  ] as const) {
    const res = await roll(subId, key.id, { expires_in_seconds: 60 })
    t.equal(res.statusCode, 409, what)
    t.equal(problemOf(res).code, 'key_not_active', what)
  }
  t.equal(await countKeys(), before, 'no key was made')
  t.same(await sql`select id, status, expires_at, revoked_at from api_keys order by seq`, rows, 'none changed')
})

t.test('bad expires_in_seconds: 400 validation_failed, and nothing changes', async (t) => {
  const subId = await newSub()
  const old = await mint(t, subId)
  const before = await countKeys()
  for (const body of [
    { expires_in_seconds: -1 },
    { expires_in_seconds: 2_592_001 },
    { expires_in_seconds: 1.5 },
    { expires_in_seconds: '60' },
    { expires_in_seconds: null },
    { expires_in_seconds: true },
  ]) {
    const res = await roll(subId, old.id, body)
    t.equal(res.statusCode, 400, JSON.stringify(body))
    const problem = problemOf(res)
    t.equal(problem.code, 'validation_failed')
    t.ok(
      problem.errors?.some((e) => e.path === '/body/expires_in_seconds'),
      `${JSON.stringify(body)} names /body/expires_in_seconds: ${res.body}`,
    )
  }
  const unknown = await roll(subId, old.id, { expires_in: 60 })
  t.equal(unknown.statusCode, 400, 'an unknown field')
  t.ok(problemOf(unknown).errors?.some((e) => e.path === '/body/expires_in'))
  t.equal(await countKeys(), before, 'no key was made')
  t.match(await getKey(subId, old.id), { status: 'active', expires_at: null }, 'the old key is untouched')
})

t.test('404 not_found: an unknown key, another sub-account’s, another parent’s', async (t) => {
  const subId = await newSub()
  const otherSubId = await newSub()
  const key = await mint(t, subId)
  const stranger = await a.createParent()
  const before = await countKeys()
  for (const [who, url] of [
    [parent.apiKey, `/v1/sub-accounts/${otherSubId}/api-keys/${key.id}/roll`],
    [parent.apiKey, `/v1/sub-accounts/${subId}/api-keys/00000000-0000-4000-8000-000000000000/roll`],
    [parent.apiKey, `/v1/sub-accounts/${subId}/api-keys/not-a-key/roll`],
    [stranger.apiKey, `/v1/sub-accounts/${subId}/api-keys/${key.id}/roll`],
  ] as const) {
    const res = await a.call(who, { method: 'POST', url, acting: 'self' })
    t.equal(res.statusCode, 404, url)
    t.equal(problemOf(res).code, 'not_found')
  }
  t.equal(await countKeys(), before)
})

t.test('concurrent rolls of one key with 0: exactly one succeeds, the others see it revoked', async (t) => {
  const subId = await newSub()
  const old = await mint(t, subId)
  const ROLLS = 6
  const waitingOnLocks = async () =>
    (
      await sql`select count(*)::int as n from pg_stat_activity
                where datname = current_database() and wait_event_type = 'Lock'`
    )[0]!.n as number
  let answers: Awaited<ReturnType<typeof roll>>[] = []
  // The test holds the old key's row while the rolls arrive, so that all of them are under way
  // together: each must wait for the row, not read it and go on.
  await sql.begin(async (tx) => {
    await tx`select id from api_keys where id = ${old.id} for update`
    const rolls = Promise.all(
      Array.from({ length: ROLLS }, (_, i) => (i % 2 === 0 ? a : b)).map((gw) =>
        gw.call(parent.apiKey, {
          method: 'POST',
          url: `/v1/sub-accounts/${subId}/api-keys/${old.id}/roll`,
          acting: 'self',
          body: { expires_in_seconds: 0 },
        }),
      ),
    )
    t.not(await eventually(1_000, async () => (await waitingOnLocks()) >= ROLLS, 5), null, 'every roll is waiting')
    // Released as the transaction ends; the rolls answer after it.
    void rolls.then((all) => (answers = all))
  })
  await eventually(5_000, async () => answers.length === ROLLS)
  const statuses = answers.map((res) => res.statusCode).sort()
  t.same(statuses, [201, 409, 409, 409, 409, 409], 'one roll, five refusals')
  for (const res of answers.filter((r) => r.statusCode === 409)) t.equal(problemOf(res).code, 'key_not_active')
  const successors = await sql`select id from api_keys where rolled_from = ${old.id}`
  t.equal(successors.length, 1, 'one successor')
})

t.test('concurrent rolls with an overlap: each makes a key, the old one takes the earliest expiry', async (t) => {
  const subId = await newSub()
  const old = await mint(t, subId)
  const before = Date.now()
  const answers = await Promise.all(
    [60, 3600, 600].map((seconds, i) =>
      (i % 2 === 0 ? a : b).call(parent.apiKey, {
        method: 'POST',
        url: `/v1/sub-accounts/${subId}/api-keys/${old.id}/roll`,
        acting: 'self',
        body: { expires_in_seconds: seconds },
      }),
    ),
  )
  t.same(
    answers.map((res) => res.statusCode),
    [201, 201, 201],
  )
  const successors = await sql`select id from api_keys where rolled_from = ${old.id}`
  t.equal(successors.length, 3, 'three successors')
  const oldExpiry = ms((await getKey(subId, old.id)).expires_at)!
  t.ok(oldExpiry >= before + 60_000 - 1 && oldExpiry <= Date.now() + 60_000, 'the shortest overlap wins')
})
