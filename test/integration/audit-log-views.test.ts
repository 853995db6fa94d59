// What the console needs of the audit log beyond its filters (docs/api.md, Audit log): a
// sub-account's events with its keys' and portal sessions' (`sub_account_id`), actors by name
// (`expand=actor`), one event by its id; and the scope ceiling a parent may grant within
// (GET /v1/sub-accounts/scopes). The default answers keep their shape.
import { randomUUID } from 'node:crypto'
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { problemOf } from '../helpers/problems.js'

const gw = await startGateway(t, { listen: false })
const parent = await gw.createParent()
const other = await gw.createParent({ name: 'other' })
const sql = gw.sql

const as = (apiKey: string, method: 'GET' | 'POST' | 'PATCH', url: string, body?: unknown) =>
  gw.call(apiKey, { method, url, acting: 'self', body })
const ok = async (apiKey: string, method: 'GET' | 'POST' | 'PATCH', url: string, body?: unknown) => {
  const res = await as(apiKey, method, url, body)
  if (res.statusCode >= 300) throw new Error(`${method} ${url}: ${res.statusCode} ${res.body}`)
  return res.json()
}
type Listed = { id: string; type: string; target: { id: string }; actor: Record<string, unknown> }
const log = async (query: string, apiKey = parent.apiKey): Promise<Listed[]> =>
  (await ok(apiKey, 'GET', `/v1/sub-accounts/events${query}`)).data

// A sub-account with a key (then rolled and revoked) and a portal session; another beside it.
const a = await ok(parent.apiKey, 'POST', '/v1/sub-accounts', { name: 'a' })
const b = await ok(parent.apiKey, 'POST', '/v1/sub-accounts', { name: 'b' })
const key = await ok(parent.apiKey, 'POST', `/v1/sub-accounts/${a.id}/api-keys`, { name: 'ci', scopes: ['x:y'] })
const rolled = await ok(parent.apiKey, 'POST', `/v1/sub-accounts/${a.id}/api-keys/${key.id}/roll`, {})
await ok(parent.apiKey, 'POST', `/v1/sub-accounts/${a.id}/api-keys/${rolled.id}/revoke`)
const session = await ok(parent.apiKey, 'POST', `/v1/sub-accounts/${a.id}/portal-sessions`, {
  permissions: ['keys:read'],
})
await ok(parent.apiKey, 'PATCH', `/v1/sub-accounts/${a.id}`, { name: 'a2' })
await ok(parent.apiKey, 'POST', `/v1/sub-accounts/${b.id}/api-keys`, { name: 'b key', scopes: ['x:y'] })
await ok(other.apiKey, 'POST', '/v1/sub-accounts', { name: 'not yours' })

t.test("sub_account_id: the sub-account's events with its keys' and portal sessions'", async (t) => {
  const events = await log(`?sub_account_id=${a.id}`)
  t.same(
    events.map((e) => [e.type, e.target.id]),
    [
      ['sub_account.updated', a.id],
      ['portal_session.created', session.id],
      ['api_key.revoked', rolled.id],
      ['api_key.rolled', rolled.id],
      ['api_key.created', key.id],
      ['sub_account.created', a.id],
    ],
    'newest first, none of b',
  )
  t.same(
    (await log(`?target_id=${a.id}`)).map((e) => e.type),
    ['sub_account.updated', 'sub_account.created'],
    'target_id keeps its exact meaning',
  )
  t.same(
    (await log(`?sub_account_id=${a.id}&type=api_key.*`)).map((e) => e.type),
    ['api_key.revoked', 'api_key.rolled', 'api_key.created'],
    'with a type',
  )
  t.same(
    (await log(`?sub_account_id=${a.id}&target_id=${key.id}`)).map((e) => e.type),
    ['api_key.created'],
    'with a target: both hold',
  )
  t.same((await log(`?sub_account_id=${a.id.toUpperCase()}`)).length, 6, 'the id in capitals is the same sub-account')
  const twoPages = await log(`?sub_account_id=${a.id}&limit=4`)
  t.equal(twoPages.length, 4)
  const page = await ok(parent.apiKey, 'GET', `/v1/sub-accounts/events?sub_account_id=${a.id}&limit=4`)
  const rest = await ok(
    parent.apiKey,
    'GET',
    `/v1/sub-accounts/events?sub_account_id=${a.id}&limit=4&cursor=${page.next_cursor}`,
  )
  t.same(
    rest.data.map((e: Listed) => e.type),
    ['api_key.created', 'sub_account.created'],
    'paged',
  )
  t.same(await log(`?sub_account_id=${a.id}`, other.apiKey), [], "another parent's sub-account: nothing")
  t.same(await log(`?sub_account_id=${randomUUID()}`), [], 'an unknown sub-account: nothing')
})

t.test('sub_account_id that is not a UUID: 400 saying what it must be', async (t) => {
  for (const value of ['nope', `${a.id}x`, '%20']) {
    const res = await as(parent.apiKey, 'GET', `/v1/sub-accounts/events?sub_account_id=${value}`)
    t.equal(res.statusCode, 400, value)
    const problem = problemOf(res)
    t.equal(problem.code, 'validation_failed')
    t.equal(problem.errors?.[0]?.path, '/querystring/sub_account_id')
    t.match(problem.errors?.[0]?.message, /must be a UUID/)
  }
})

t.test('expand=actor names each actor; without it the actor is as before', async (t) => {
  // A change made in the portal is written with the session as its actor (docs/events.md).
  await sql`insert into events (id, account_id, type, actor, target, request_id, source_ip, data)
    values ('evt_01JD0000000000000000000000', ${parent.id}, 'api_key.created',
            ${sql.json({ type: 'portal_session', id: session.id, key_id: null })},
            ${sql.json({ type: 'api_key', id: key.id })}, 'req', '127.0.0.1',
            ${sql.json({ object: { id: key.id }, previous: null })})`
  t.teardown(() => sql`delete from events where id = 'evt_01JD0000000000000000000000'`)
  const plain = await log(`?sub_account_id=${a.id}&limit=100`)
  t.ok(
    plain.every((e) => Object.keys(e.actor).every((k) => ['type', 'key_id', 'id'].includes(k))),
    'no name without expand',
  )
  const expanded = await log(`?sub_account_id=${a.id}&limit=100&expand=actor`)
  const [parentKey] = (await sql`select name, prefix from api_keys where id = ${parent.keyId}`) as unknown as [
    { name: string; prefix: string },
  ]
  t.same(
    expanded.find((e) => e.type === 'sub_account.updated')?.actor,
    { type: 'api_key', key_id: parent.keyId, name: parentKey.name, prefix: parentKey.prefix, sub_account_id: null },
    "the parent's own key: its name and prefix",
  )
  t.same(
    expanded.find((e) => e.actor.type === 'portal_session')?.actor,
    { type: 'portal_session', id: session.id, key_id: null, sub_account_id: a.id },
    'a portal session: its sub-account',
  )
  t.same(
    expanded.map((e) => e.id),
    plain.map((e) => e.id),
    'the same events',
  )

  // The operator's change has no key to name; another parent's key is not named to this one.
  await sql`insert into events (id, account_id, type, actor, target, request_id, source_ip, data)
    values ('evt_01JD0000000000000000000001', ${parent.id}, 'sub_account.updated',
            ${sql.json({ type: 'api_key', key_id: other.keyId })},
            ${sql.json({ type: 'sub_account', id: a.id })}, 'req', '127.0.0.1',
            ${sql.json({ object: { id: a.id }, previous: null })})`
  t.teardown(() => sql`delete from events where id = 'evt_01JD0000000000000000000001'`)
  const [theirs] = await log(`?target_id=${a.id}&limit=1&expand=actor`)
  t.same(
    theirs?.actor,
    { type: 'api_key', key_id: other.keyId, name: null, prefix: null, sub_account_id: null },
    "another account's key: not named",
  )
  const res = await as(parent.apiKey, 'GET', '/v1/sub-accounts/events?expand=everything')
  t.equal(res.statusCode, 400)
  t.equal(problemOf(res).errors?.[0]?.path, '/querystring/expand')
})

t.test('GET /events/{id}: the event as listed; 404 for unknown, malformed and another parent', async (t) => {
  const [first] = await log(`?target_id=${b.id}&limit=1`)
  const got = await ok(parent.apiKey, 'GET', `/v1/sub-accounts/events/${first!.id}`)
  t.same(got, first)
  const [theirs] = await log('?limit=1', other.apiKey)
  for (const id of [theirs!.id, 'evt_01JD9999999999999999999999', 'nope', 'evt_01jd0000000000000000000000']) {
    const res = await as(parent.apiKey, 'GET', `/v1/sub-accounts/events/${id}`)
    t.equal(res.statusCode, 404, id)
    t.equal(problemOf(res).code, 'not_found', id)
  }
})

t.test("GET /scopes: the operator's ceiling, null when any", async (t) => {
  t.same(await ok(parent.apiKey, 'GET', '/v1/sub-accounts/scopes'), { allowed_scopes: null })
  await sql`update tenants set allowed_scopes = array['orders:read', 'tracking:*'] where id = ${parent.id}`
  t.same(await ok(parent.apiKey, 'GET', '/v1/sub-accounts/scopes'), { allowed_scopes: ['orders:read', 'tracking:*'] })
  t.same(await ok(other.apiKey, 'GET', '/v1/sub-accounts/scopes'), { allowed_scopes: null }, "another's own")
  const res = await as(parent.apiKey, 'GET', '/v1/sub-accounts/scopes?x=1')
  t.equal(res.statusCode, 400)
  const limits = await ok(parent.apiKey, 'GET', '/v1/sub-accounts/limits')
  t.same(Object.keys(limits).sort(), ['account', 'month', 'used'], 'the limits answer keeps its shape')
})
