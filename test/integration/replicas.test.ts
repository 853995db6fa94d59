// Two replicas of one deployment (docs/internals.md): gateways A and B, each on its own socket,
// sharing one Postgres database and one Redis prefix, in front of one recording upstream. Every
// change is made through A after B's in-process cache was warmed with the old state; B must follow
// within 1 s.
//
// A and B keep found and "not found" records in-process for a minute here, and A sends each
// invalidation once only (its second send, a second later, is put off by a minute), so that only
// the one message of the change under test (or, in the reconnect case, the reconnect) can make B
// change its answer within the second the tests allow: neither an expiring entry nor the repeated
// message of an earlier change made while setting up. Only the lost-message case uses a short TTL.
import type { Redis } from 'ioredis'
import t from 'tap'
import { createHash } from 'node:crypto'
import { generateApiKey } from '../../src/auth/key-format.js'
import { mintKey } from '../../src/auth/mint.js'
import { metricValue, startGateway, startReplicas, type GatewayOptions, type TestGateway } from '../helpers/gateway.js'
import { callAs, type RawResponse } from '../helpers/http.js'
import { eventually, sleep } from '../helpers/poll.js'
import { redisClient } from '../helpers/redis.js'
import { startUpstream } from '../helpers/upstream.js'

/** What the helpers below need of a test. */
type Assert = Pick<typeof t, 'equal' | 'ok' | 'not' | 'comment'>

const SLOW_LOCAL_EXPIRY: GatewayOptions['cacheTimings'] = {
  localTtlMs: 60_000,
  negativeTtlMs: 60_000,
  reinvalidateAfterMs: 60_000,
}

const upstream = await startUpstream(t)
const [a, b] = (await startReplicas(t, 2, { upstreamUrl: upstream.url, cacheTimings: SLOW_LOCAL_EXPIRY })) as [
  TestGateway,
  TestGateway,
]
const sql = a.database.sql
const prefix = a.redisKeyPrefix
const channel = `${prefix}invalidate`

const redis = redisClient(t)

/** Waits until `count` replicas are subscribed to this deployment's invalidation channel. */
async function subscribers(count: number): Promise<boolean> {
  const took = await eventually(5_000, async () => {
    const reply = (await redis.pubsub('NUMSUB', channel)) as [string, number | string]
    return Number(reply[1]) === count
  })
  return took !== null
}

// A change made before a replica has subscribed would be lost to it: start only once both listen.
t.ok(await subscribers(2), 'A and B are both subscribed to the invalidation channel')

// ---------------------------------------------------------------------------------------------
// Helpers

const codeOf = (res: RawResponse): string | null => {
  try {
    return (res.json() as { code?: string }).code ?? null
  } catch {
    return null
  }
}

/** The tenant the upstream was told the request acts as (the echo upstream returns what it got). */
const resolvedOf = (res: RawResponse): unknown =>
  (res.json() as { headers: Record<string, unknown> }).headers['x-service-resolved-tenant']

const read = (gw: TestGateway, key: string, acting?: string) =>
  callAs(gw.url, key, { path: '/orders', ...(acting === undefined ? {} : { acting }) })

const write = (gw: TestGateway, key: string, acting?: string) =>
  callAs(gw.url, key, { method: 'POST', path: '/orders', json: { n: 1 }, ...(acting === undefined ? {} : { acting }) })

/** A management call; `acting` defaults to self, `null` sends no header. */
const manage = (
  gw: TestGateway,
  key: string,
  method: string,
  path: string,
  json?: unknown,
  acting: string | null = 'self',
) =>
  callAs(gw.url, key, {
    method,
    path: `/v1/sub-accounts${path}`,
    ...(json === undefined ? {} : { json }),
    ...(acting === null ? {} : { acting }),
  })

/** True when the response is the refusal `status` + `code`. */
const refused = (res: RawResponse, status: number, code: string) => res.status === status && codeOf(res) === code

const describe = (res: RawResponse) => `${res.status} ${codeOf(res) ?? res.body.slice(0, 120)}`

interface Sub {
  id: string
  external_id: string | null
}

interface Minted {
  id: string
  api_key: string
}

async function createSub(
  t: Assert,
  gw: TestGateway,
  parentKey: string,
  body: Record<string, unknown>,
  acting: string | null = 'self',
): Promise<Sub> {
  const res = await manage(gw, parentKey, 'POST', '', body, acting)
  t.equal(
    res.status,
    201,
    `sub-account ${JSON.stringify(body)} created through ${gw === a ? 'A' : 'the replica'}: ${describe(res)}`,
  )
  return res.json() as Sub
}

async function mint(t: Assert, gw: TestGateway, parentKey: string, subId: string): Promise<Minted> {
  const res = await manage(gw, parentKey, 'POST', `/${subId}/api-keys`, { name: 'k', scopes: ['orders:read'] })
  t.equal(res.status, 201, `key minted: ${describe(res)}`)
  return res.json() as Minted
}

/**
 * Polls B (or another replica) until `check` holds, for at most `ms`; asserts it did and that it
 * still holds on the next request, and reports how long it took.
 */
async function follows(
  t: Assert,
  what: string,
  probe: () => Promise<RawResponse>,
  check: (res: RawResponse) => boolean,
  ms = 1_000,
): Promise<number | null> {
  let last: RawResponse | null = null
  const took = await eventually(ms, async () => {
    last = await probe()
    return check(last)
  })
  t.not(took, null, `${what} within ${ms} ms (last answer: ${last === null ? 'none' : describe(last)})`)
  if (took !== null) {
    t.comment(`${what}: ${took} ms`)
    const again = await probe()
    t.ok(check(again), `${what}: and it stays so (${describe(again)})`)
  }
  return took
}

/** One labelled value of a counter of `gw`'s registry. */
const counter = (gw: TestGateway, name: string, tier?: 'postgres' | 'redis' | 'local') =>
  metricValue(gw.app, name, tier === undefined ? {} : { tier })

async function lookups(gw: TestGateway): Promise<{ postgres: number; redis: number; local: number; recent: number }> {
  return {
    postgres: await counter(gw, 'tgw_store_lookups_total', 'postgres'),
    redis: await counter(gw, 'tgw_store_lookups_total', 'redis'),
    local: await counter(gw, 'tgw_cache_hits_total', 'local'),
    recent: await counter(gw, 'tgw_recent_admissions_total'),
  }
}

const keyEntry = (apiKey: string) => `${prefix}{key:${createHash('sha256').update(apiKey).digest('hex')}}`

/**
 * Mints a key in Postgres only. A key minted through the API is followed by an invalidation of its
 * cache entry and by the same message again a second later, which would evict it from B's cache
 * and hide whether a later silent revoke is noticed for the reason under test.
 */
async function mintInSqlOnly(tenantId: string): Promise<Minted> {
  const minted = await mintKey(sql, { tenantId, name: 'silent', scopes: ['orders:read'], withClientSecret: false })
  return { id: minted.row.id, api_key: minted.apiKey }
}

/** Revokes a key in Postgres only: no Redis delete, no message. */
async function revokeInSqlOnly(keyId: string): Promise<void> {
  const rows = await sql`update api_keys set status = 'revoked', revoked_at = now() where id = ${keyId} returning id`
  if (rows.length !== 1) throw new Error(`no key ${keyId}`)
}

const revokeTimes: string[] = []

// ---------------------------------------------------------------------------------------------

t.test('1. a sub-account key revoked through A is refused by B within 1 s', async (t) => {
  const parent = await a.createParent()
  const sub = await createSub(t, a, parent.apiKey, { name: 'one' }, null)
  const key = await mint(t, a, parent.apiKey, sub.id)
  const other = await mint(t, a, parent.apiKey, sub.id)

  for (const gw of [b, b]) {
    const warm = await read(gw, key.api_key)
    t.equal(warm.status, 200, `B accepts the key before the revoke (${describe(warm)})`)
  }
  t.equal((await read(b, other.api_key)).status, 200, 'B accepts the other key before the revoke')

  const revoke = await manage(a, parent.apiKey, 'POST', `/${sub.id}/api-keys/${key.id}/revoke`)
  t.equal(revoke.status, 200, `revoked through A: ${describe(revoke)}`)
  t.equal(revoke.json().status, 'revoked')

  const onA = await read(a, key.api_key)
  t.ok(refused(onA, 401, 'unauthenticated'), `A refuses at once (${describe(onA)})`)
  const took = await follows(
    t,
    'B refuses the key revoked through A',
    () => read(b, key.api_key),
    (res) => refused(res, 401, 'unauthenticated'),
  )
  revokeTimes.push(`revoke through A -> refused by B (bus): ${took} ms`)
  t.equal((await read(b, other.api_key)).status, 200, 'the other key of the sub-account still works on B')
})

t.test('2. a sub-account deactivated through A is refused by B, and accepted again after reactivation', async (t) => {
  const parent = await a.createParent()
  const sub = await createSub(t, a, parent.apiKey, { name: 'two', external_id: 'acme-eu' })
  const key = await mint(t, a, parent.apiKey, sub.id)

  const byUuid = () => read(b, parent.apiKey, sub.id)
  const byExt = () => read(b, parent.apiKey, 'ext:acme-eu')
  const ownKey = () => read(b, key.api_key)

  for (const [what, probe] of [
    ['acting by uuid', byUuid],
    ['acting by ext:', byExt],
    ["the sub-account's own key", ownKey],
  ] as const) {
    const warm = await probe()
    t.equal(warm.status, 200, `B accepts ${what} before the deactivation (${describe(warm)})`)
    t.equal(resolvedOf(warm), sub.id, `B resolves ${what} to the sub-account`)
  }

  const off = await manage(a, parent.apiKey, 'POST', `/${sub.id}/deactivate`)
  t.equal(off.status, 200, `deactivated through A: ${describe(off)}`)
  t.equal(off.json().status, 'deactivated')

  t.ok(refused(await read(a, parent.apiKey, sub.id), 403, 'acting_tenant_deactivated'), 'A refuses the target at once')
  const took = await follows(t, 'B refuses acting by uuid (deactivated)', byUuid, (res) =>
    refused(res, 403, 'acting_tenant_deactivated'),
  )
  revokeTimes.push(`deactivate through A -> refused by B: ${took} ms`)
  await follows(t, 'B refuses acting by ext: (deactivated)', byExt, (res) =>
    refused(res, 403, 'acting_tenant_deactivated'),
  )
  await follows(t, "B refuses the deactivated sub-account's own key", ownKey, (res) =>
    refused(res, 403, 'tenant_deactivated'),
  )

  // B now holds the deactivated state: reactivate through A.
  const on = await manage(a, parent.apiKey, 'POST', `/${sub.id}/reactivate`)
  t.equal(on.status, 200, `reactivated through A: ${describe(on)}`)
  t.equal(on.json().status, 'active')

  t.equal((await read(a, parent.apiKey, sub.id)).status, 200, 'A accepts the target at once')
  const back = await follows(
    t,
    'B accepts acting by uuid again',
    byUuid,
    (res) => res.status === 200 && resolvedOf(res) === sub.id,
  )
  revokeTimes.push(`reactivate through A -> accepted by B: ${back} ms`)
  await follows(t, 'B accepts acting by ext: again', byExt, (res) => res.status === 200 && resolvedOf(res) === sub.id)
  await follows(
    t,
    "B accepts the sub-account's own key again",
    ownKey,
    (res) => res.status === 200 && resolvedOf(res) === sub.id,
  )
})

t.test('3. the write-header rule follows create, deactivate and reactivate on both replicas', async (t) => {
  const parent = await a.createParent()
  const required = (res: RawResponse) => refused(res, 400, 'acting_tenant_required')
  const passes = (res: RawResponse) => res.status === 200 && resolvedOf(res) === parent.id

  for (const [name, gw] of [
    ['A', a],
    ['B', b],
  ] as const) {
    const res = await write(gw, parent.apiKey)
    t.ok(passes(res), `no sub-account: a POST without the header passes on ${name} (${describe(res)})`)
  }

  const sub = await createSub(t, a, parent.apiKey, { name: 'first' }, null)
  const onA = await write(a, parent.apiKey)
  t.ok(required(onA), `after the first sub-account: required on A at once (${describe(onA)})`)
  await follows(t, 'after the first sub-account: required on B', () => write(b, parent.apiKey), required)
  t.ok(passes(await write(b, parent.apiKey, 'self')), 'B: with self it passes')

  const off = await manage(a, parent.apiKey, 'POST', `/${sub.id}/deactivate`)
  t.equal(off.status, 200, `deactivated through A: ${describe(off)}`)
  const offA = await write(a, parent.apiKey)
  t.ok(passes(offA), `only a deactivated sub-account: passes on A at once (${describe(offA)})`)
  await follows(t, 'only a deactivated sub-account: passes on B', () => write(b, parent.apiKey), passes)

  const on = await manage(a, parent.apiKey, 'POST', `/${sub.id}/reactivate`)
  t.equal(on.status, 200, `reactivated through A: ${describe(on)}`)
  const onAgainA = await write(a, parent.apiKey)
  t.ok(required(onAgainA), `reactivated: required on A at once (${describe(onAgainA)})`)
  await follows(t, 'reactivated: required on B', () => write(b, parent.apiKey), required)

  t.equal((await read(b, parent.apiKey)).status, 200, 'a GET never needs the header')
})

t.test('4. external_id created, renamed and cleared through A: B follows every name', async (t) => {
  const parent = await a.createParent()
  const forbidden = (res: RawResponse) => refused(res, 403, 'acting_tenant_forbidden')

  // Before the sub-account exists, B caches ext:old-name as "no such sub-account".
  const none = await read(b, parent.apiKey, 'ext:old-name')
  t.ok(forbidden(none), `before the sub-account exists: B refuses ext:old-name (${describe(none)})`)
  const sub = await createSub(t, a, parent.apiKey, { name: 'four', external_id: 'old-name' })
  const resolves = (res: RawResponse) => res.status === 200 && resolvedOf(res) === sub.id
  const created = await follows(
    t,
    'B resolves ext:old-name of the sub-account created through A',
    () => read(b, parent.apiKey, 'ext:old-name'),
    resolves,
  )
  revokeTimes.push(`sub-account created through A -> its ext: resolved by B: ${created} ms`)
  const key = await mint(t, a, parent.apiKey, sub.id)

  // B learns both names: the old one resolves, the new one is cached as "no such sub-account".
  t.ok(resolves(await read(b, parent.apiKey, 'ext:old-name')), 'before: B resolves ext:old-name')
  t.ok(forbidden(await read(b, parent.apiKey, 'ext:new-name')), 'before: B refuses ext:new-name')
  t.ok(
    resolves(await read(b, key.api_key, 'ext:old-name')),
    "before: the sub-account's key may name itself ext:old-name",
  )
  t.ok(forbidden(await read(b, key.api_key, 'ext:new-name')), "before: the sub-account's key may not name ext:new-name")

  const renamed = await manage(a, parent.apiKey, 'PATCH', `/${sub.id}`, { external_id: 'new-name' })
  t.equal(renamed.status, 200, `renamed through A: ${describe(renamed)}`)
  t.equal(renamed.json().external_id, 'new-name')

  const took = await follows(t, 'B resolves ext:new-name', () => read(b, parent.apiKey, 'ext:new-name'), resolves)
  revokeTimes.push(`external_id renamed through A -> new name resolved by B: ${took} ms`)
  await follows(t, 'B refuses ext:old-name', () => read(b, parent.apiKey, 'ext:old-name'), forbidden)
  await follows(
    t,
    "B lets the sub-account's key name itself ext:new-name",
    () => read(b, key.api_key, 'ext:new-name'),
    resolves,
  )
  await follows(
    t,
    "B refuses the sub-account's key naming ext:old-name",
    () => read(b, key.api_key, 'ext:old-name'),
    forbidden,
  )

  const cleared = await manage(a, parent.apiKey, 'PATCH', `/${sub.id}`, { external_id: null })
  t.equal(cleared.status, 200, `cleared through A: ${describe(cleared)}`)
  t.equal(cleared.json().external_id, null)

  await follows(t, 'B refuses ext:new-name once cleared', () => read(b, parent.apiKey, 'ext:new-name'), forbidden)
  await follows(
    t,
    "B refuses the sub-account's key naming ext:new-name once cleared",
    () => read(b, key.api_key, 'ext:new-name'),
    forbidden,
  )
  t.ok(resolves(await read(b, parent.apiKey, sub.id)), 'the uuid still resolves on B')
})

t.test('5. an unknown key is asked of Postgres once, then answered from the negative cache', async (t) => {
  const unknown = generateApiKey().apiKey
  const start = await lookups(b)
  const first = await read(b, unknown)
  t.ok(refused(first, 401, 'unauthenticated'), `B refuses an unknown key (${describe(first)})`)
  const afterFirst = await lookups(b)
  const second = await read(b, unknown)
  t.ok(refused(second, 401, 'unauthenticated'), `B refuses it again (${describe(second)})`)
  const afterSecond = await lookups(b)

  t.equal(afterFirst.postgres - start.postgres, 1, 'the first request asked Postgres once')
  t.equal(afterSecond.postgres - afterFirst.postgres, 0, 'the second request did not ask Postgres')
  t.equal(afterSecond.redis - afterFirst.redis, 0, 'nor Redis: B answered from its in-process negative cache')
  t.ok(afterSecond.local > afterFirst.local, 'the second request was an in-process hit')

  // The "not found" is shared through Redis: A does not ask Postgres either.
  // (Unless a Redis command failed or timed out, 50 ms, on a loaded machine: A's read, or B's
  // store of the "not found", which B does not wait for. Then A asks Postgres, as designed, and
  // an error counter says so.)
  const aStart = await lookups(a)
  t.ok(refused(await read(a, unknown), 401, 'unauthenticated'), 'A refuses it too')
  const aEnd = await lookups(a)
  const redisErrors = (await counter(a, 'tgw_redis_errors_total')) + (await counter(b, 'tgw_redis_errors_total'))
  if (aEnd.redis - aStart.redis === 0 && redisErrors > 0) {
    t.comment(
      'a Redis command failed on A or B (fallback to Postgres); the shared "not found" was not observable this time',
    )
    t.equal(aEnd.postgres - aStart.postgres, 1, 'A asked Postgres instead')
  } else {
    t.equal(aEnd.postgres - aStart.postgres, 0, 'A did not ask Postgres for a key B already found unknown')
    t.equal(aEnd.redis - aStart.redis, 1, 'A found the "not found" in Redis')
  }

  // A key minted through A works on B at once.
  const parent = await a.createParent()
  const sub = await createSub(t, a, parent.apiKey, { name: 'five' })
  const key = await mint(t, a, parent.apiKey, sub.id)
  const fresh = await read(b, key.api_key)
  t.equal(fresh.status, 200, `a key minted through A works on B at once (${describe(fresh)})`)
})

t.test('6. once warm, B makes no store round-trip', async (t) => {
  const parent = await a.createParent()
  const sub = await createSub(t, a, parent.apiKey, { name: 'six' })
  for (let i = 0; i < 2; i++) t.equal((await read(b, parent.apiKey, sub.id)).status, 200, 'warming B')

  const before = await lookups(b)
  const receivedBefore = upstream.received.length
  let ok = 0
  for (let i = 0; i < 50; i++) {
    const res = await read(b, parent.apiKey, sub.id)
    if (res.status === 200 && resolvedOf(res) === sub.id) ok++
  }
  const after = await lookups(b)
  t.equal(ok, 50, 'all 50 requests were proxied as the sub-account')
  t.equal(upstream.received.length - receivedBefore, 50, 'the upstream received all 50')
  t.equal(after.postgres - before.postgres, 0, 'no Postgres lookup')
  t.equal(after.redis - before.redis, 0, 'no Redis lookup')
  // A request is admitted from the last second's admissions (no lookup), or else looks up the
  // key, its tenant and the acting tenant, each an in-process hit.
  const fromMemory = after.recent - before.recent + (after.local - before.local) / 3
  t.ok(
    fromMemory >= 50,
    `every request was admitted in-process (${after.recent - before.recent} recent admissions, ${after.local - before.local} cache hits)`,
  )
})

t.test("7. a reconnect of B's subscriber clears B's in-process cache", async (t) => {
  const parent = await a.createParent()
  const sub = await createSub(t, a, parent.apiKey, { name: 'seven' })
  const key = await mintInSqlOnly(sub.id)
  t.equal((await read(b, key.api_key)).status, 200, 'B accepts the key (warm)')

  // Revoked behind the caches' back: no message, and the Redis entry gone too.
  await revokeInSqlOnly(key.id)
  await redis.del(keyEntry(key.api_key))
  t.equal(await redis.exists(keyEntry(key.api_key)), 0, 'Redis holds no entry for the key')
  const revokedAt = Date.now()
  t.equal((await read(b, key.api_key)).status, 200, 'B still serves its in-process copy (no message was sent)')
  await sleep(300)
  const stale = await read(b, key.api_key)
  t.equal(stale.status, 200, `and still does 300 ms later: only the reconnect can make it forget (${describe(stale)})`)

  // B's subscriber is the connection whose client-side port is that of B's subscriber socket.
  // Reading the private field is the only way to tell B's subscriber from A's and from other
  // test files' on the same Redis server; nothing else is killed.
  const subscriber = (b.app.tenancyCache as unknown as { subscriber: Redis }).subscriber
  const localPort = subscriber.stream.localPort
  const list = String(await redis.call('CLIENT', 'LIST', 'TYPE', 'pubsub'))
  const mine = list
    .split('\n')
    .filter(
      (line) =>
        line.includes(` addr=127.0.0.1:${localPort} `) ||
        line.includes(` addr=[::1]:${localPort} `) ||
        line.includes(` addr=::1:${localPort} `),
    )
    .filter((line) => / sub=[1-9]/.test(line))
  t.equal(mine.length, 1, `found B's subscriber connection (local port ${localPort})`)
  const id = /(?:^|\s)id=(\d+)/.exec(mine[0] ?? '')?.[1]
  t.ok(id, "B's subscriber has a client id")
  if (id === undefined) return
  const killed = await redis.client('KILL', 'ID', id)
  t.equal(Number(killed), 1, "killed exactly B's subscriber")
  const killedAt = Date.now()

  const took = await follows(
    t,
    'B refuses the key after its subscriber reconnected',
    () => read(b, key.api_key),
    (res) => refused(res, 401, 'unauthenticated'),
  )
  revokeTimes.push(
    `subscriber killed -> refused by B (reconnect clears the cache): ${took} ms (${killedAt - revokedAt} ms after the silent revoke)`,
  )

  // And the bus works again after the reconnect.
  t.ok(await subscribers(2), 'B is subscribed again')
  const other = await mint(t, a, parent.apiKey, sub.id)
  t.equal((await read(b, other.api_key)).status, 200, 'B accepts another key (warm)')
  t.equal(
    (await manage(a, parent.apiKey, 'POST', `/${sub.id}/api-keys/${other.id}/revoke`)).status,
    200,
    'revoked through A',
  )
  const again = await follows(
    t,
    'after the reconnect, B follows a revoke through A',
    () => read(b, other.api_key),
    (res) => refused(res, 401, 'unauthenticated'),
  )
  revokeTimes.push(`revoke through A after the reconnect -> refused by B: ${again} ms`)
})

t.test('8. a lost message is bounded by the in-process TTL', async (t) => {
  const localTtlMs = 300
  const c = await startGateway(t, {
    upstreamUrl: upstream.url,
    database: a.database,
    redisKeyPrefix: prefix,
    cacheTimings: { localTtlMs, reinvalidateAfterMs: 100_000 },
  })
  t.ok(await subscribers(3), 'the third replica is subscribed')
  const parent = await a.createParent()
  const sub = await createSub(t, a, parent.apiKey, { name: 'eight' })
  const key = await mintInSqlOnly(sub.id)

  // A fresh in-process entry, so that its TTL starts now.
  c.app.tenancyCache.clearLocal()
  const warm = await read(c, key.api_key)
  t.equal(warm.status, 200, `the replica accepts the key (warm): ${describe(warm)}`)
  const warmedAt = Date.now()

  await revokeInSqlOnly(key.id)
  await redis.del(keyEntry(key.api_key))
  t.equal(await redis.exists(keyEntry(key.api_key)), 0, 'Redis holds no entry for the key')
  const revokedAt = Date.now()
  const right = await read(c, key.api_key)
  t.equal(
    right.status,
    200,
    `right after the silent revoke the replica still serves its copy (${describe(right)}; ${Date.now() - warmedAt} ms after warming)`,
  )

  const took = await follows(
    t,
    'the replica refuses once its in-process entry expired',
    () => read(c, key.api_key),
    (res) => refused(res, 401, 'unauthenticated'),
    1_500,
  )
  if (took !== null) {
    revokeTimes.push(
      `silent revoke (no message) -> refused by the replica with localTtlMs ${localTtlMs}: ${took} ms (${revokedAt - warmedAt + took} ms after warming)`,
    )
  }
})

t.test('measured times', async (t) => {
  for (const line of revokeTimes) t.comment(line)
  t.comment(
    `redis errors: A ${await counter(a, 'tgw_redis_errors_total')}, B ${await counter(b, 'tgw_redis_errors_total')}`,
  )
  t.pass('reported')
})
