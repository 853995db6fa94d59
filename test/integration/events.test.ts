// Events of the management API (docs/events.md): each change writes exactly one event of its type,
// in the transaction of the change, with the actor, target, request id, source address, the object
// after and the changed fields before; a repeat that changes nothing writes none; and no event
// holds a key, a client secret or a digest.
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { checkNoSecrets, eventsOf, newEvents } from '../helpers/events.js'

const gw = await startGateway(t, { listen: false })
const parent = await gw.createParent()
const other = await gw.createParent({ name: 'other' })
const sql = gw.sql

let counter = 0
/** A management call as the parent, with a request id of the test's; returns the response and the id. */
async function change(method: 'POST' | 'PATCH', url: string, body?: unknown) {
  const requestId = `events-test-${++counter}`
  const seen = (await eventsOf(sql, parent.id)).length
  const res = await gw.call(parent.apiKey, {
    method,
    url,
    acting: 'self',
    body,
    headers: { 'x-request-id': requestId },
  })
  return { res, requestId, events: () => newEvents(sql, parent.id, seen) }
}

const byApi = (requestId: string) => ({
  actor: { type: 'api_key', key_id: parent.keyId },
  request_id: requestId,
  source_ip: '127.0.0.1',
  account_id: parent.id,
})

let subId = ''

t.test('sub_account.created', async (t) => {
  const { res, requestId, events } = await change('POST', '/v1/sub-accounts', {
    name: 'Acme',
    external_id: 'acme',
    metadata: { plan: 'pro' },
  })
  t.equal(res.statusCode, 201, res.body)
  subId = res.json().id
  const list = await events()
  t.equal(list.length, 1, 'exactly one event')
  t.match(list[0], {
    ...byApi(requestId),
    id: /^evt_[0-9A-HJKMNP-TV-Z]{26}$/,
    type: 'sub_account.created',
    target: { type: 'sub_account', id: subId },
  })
  t.same(list[0].data, { object: res.json(), previous: null }, 'the object is the response')
})

t.test('sub_account.updated: the changed fields before; nothing changed, no event', async (t) => {
  const { res, requestId, events } = await change('PATCH', `/v1/sub-accounts/${subId}`, {
    name: 'Acme Inc',
    metadata: { plan: 'pro' },
    limits: { rate: { requests: 10, per_seconds: 1 } },
  })
  t.equal(res.statusCode, 200, res.body)
  const list = await events()
  t.equal(list.length, 1, 'exactly one event')
  t.match(list[0], { ...byApi(requestId), type: 'sub_account.updated', target: { type: 'sub_account', id: subId } })
  t.same(list[0].data.object, res.json())
  t.same(
    list[0].data.previous,
    { name: 'Acme', limits: { rate: null, monthly_quota: null } },
    'only the fields that changed: metadata was given as it was',
  )

  const updatedAt = res.json().updated_at
  for (const body of [
    { name: 'Acme Inc' },
    { name: '  Acme Inc  ', external_id: 'acme' },
    { metadata: { plan: 'pro' } },
    { limits: { rate: { per_seconds: 1, requests: 10 }, monthly_quota: null } },
  ]) {
    const same = await change('PATCH', `/v1/sub-accounts/${subId}`, body)
    t.equal(same.res.statusCode, 200, same.res.body)
    t.equal(same.res.json().updated_at, updatedAt, `${JSON.stringify(body)}: the row is not written`)
    t.same(await same.events(), [], `${JSON.stringify(body)}: no event`)
  }

  const cleared = await change('PATCH', `/v1/sub-accounts/${subId}`, { external_id: null })
  t.same(
    (await cleared.events()).map((e) => [e.type, e.data.previous]),
    [['sub_account.updated', { external_id: 'acme' }]],
  )
})

t.test('sub_account.deactivated and reactivated; repeats write none', async (t) => {
  const off = await change('POST', `/v1/sub-accounts/${subId}/deactivate`)
  t.equal(off.res.statusCode, 200)
  const [deactivated, ...more] = await off.events()
  t.same(more, [], 'exactly one event')
  t.match(deactivated, { ...byApi(off.requestId), type: 'sub_account.deactivated', target: { id: subId } })
  t.same(deactivated.data, { object: off.res.json(), previous: { status: 'active', deactivated_at: null } })

  const again = await change('POST', `/v1/sub-accounts/${subId}/deactivate`)
  t.equal(again.res.statusCode, 200)
  t.same(await again.events(), [], 'deactivating again: no event')

  const on = await change('POST', `/v1/sub-accounts/${subId}/reactivate`)
  const [reactivated, ...rest] = await on.events()
  t.same(rest, [])
  t.match(reactivated, { ...byApi(on.requestId), type: 'sub_account.reactivated' })
  t.same(reactivated.data.previous, { status: 'deactivated', deactivated_at: off.res.json().deactivated_at })
  t.same((await (await change('POST', `/v1/sub-accounts/${subId}/reactivate`)).events()).length, 0, 'again: none')
})

t.test('api_key.created, rolled and revoked: no secret anywhere', async (t) => {
  const minted = await change('POST', `/v1/sub-accounts/${subId}/api-keys`, { name: 'k', scopes: ['orders:read'] })
  t.equal(minted.res.statusCode, 201, minted.res.body)
  const key = minted.res.json()
  const [created, ...more] = await minted.events()
  t.same(more, [])
  t.match(created, { ...byApi(minted.requestId), type: 'api_key.created', target: { type: 'api_key', id: key.id } })
  const { api_key: _k, client_secret: _s, ...shown } = key
  t.same(created.data, {
    object: { ...shown, revoked_at: null, last_used_at: null, leaked: null, sub_account_id: subId },
    previous: null,
  })

  const rolled = await change('POST', `/v1/sub-accounts/${subId}/api-keys/${key.id}/roll`, { expires_in_seconds: 60 })
  t.equal(rolled.res.statusCode, 201, rolled.res.body)
  const next = rolled.res.json()
  const [roll, ...rollMore] = await rolled.events()
  t.same(rollMore, [])
  t.match(roll, { ...byApi(rolled.requestId), type: 'api_key.rolled', target: { type: 'api_key', id: next.id } })
  t.match(roll.data.object, { id: next.id, rolled_from: key.id, sub_account_id: subId })
  t.match(roll.data.previous, { id: key.id, status: 'active', expires_at: null, sub_account_id: subId })

  const revoked = await change('POST', `/v1/sub-accounts/${subId}/api-keys/${next.id}/revoke`)
  t.equal(revoked.res.statusCode, 200)
  const [revoke, ...revokeMore] = await revoked.events()
  t.same(revokeMore, [])
  t.match(revoke, { ...byApi(revoked.requestId), type: 'api_key.revoked', target: { type: 'api_key', id: next.id } })
  t.same(revoke.data, {
    object: { ...revoked.res.json(), sub_account_id: subId },
    previous: { status: 'active', revoked_at: null },
  })
  const again = await change('POST', `/v1/sub-accounts/${subId}/api-keys/${next.id}/revoke`)
  t.equal(again.res.statusCode, 200)
  t.same(await again.events(), [], 'revoking again: no event')

  await checkNoSecrets(t, sql, [key.api_key, key.client_secret, next.api_key, next.client_secret])
})

t.test('a refused change writes no event', async (t) => {
  const seen = (await eventsOf(sql, parent.id)).length
  const bad = await gw.call(parent.apiKey, { method: 'POST', url: '/v1/sub-accounts', acting: 'self', body: {} })
  t.equal(bad.statusCode, 400)
  const unknown = await gw.call(parent.apiKey, {
    method: 'POST',
    url: `/v1/sub-accounts/${subId}/api-keys/00000000-0000-4000-8000-000000000000/revoke`,
    acting: 'self',
  })
  t.equal(unknown.statusCode, 404)
  const taken = await gw.call(parent.apiKey, {
    method: 'POST',
    url: '/v1/sub-accounts',
    acting: 'self',
    body: { name: 'dup', external_id: 'dup' },
  })
  t.equal(taken.statusCode, 201)
  const conflict = await gw.call(parent.apiKey, {
    method: 'POST',
    url: '/v1/sub-accounts',
    acting: 'self',
    body: { name: 'dup', external_id: 'dup' },
  })
  t.equal(conflict.statusCode, 409)
  t.equal((await eventsOf(sql, parent.id)).length, seen + 1, 'only the created one')
  t.same(await eventsOf(sql, other.id), [], "another parent's log is untouched")
})

/** Triggers that fail a transaction at its commit, after every statement of it succeeded. */
async function failAtCommit(tables: string[]): Promise<() => Promise<void>> {
  await sql.unsafe(`
    create or replace function tgw_test_refuse() returns trigger language plpgsql as $$
    begin raise exception 'refused at commit'; end $$`)
  for (const table of tables)
    await sql.unsafe(`
      create constraint trigger refuse_${table} after insert or update on ${table}
        deferrable initially deferred for each row execute function tgw_test_refuse()`)
  return async () => {
    for (const table of tables) await sql.unsafe(`drop trigger refuse_${table} on ${table}`)
  }
}

/** What the changes below could change (a key's last use is the usage meter's, left out). */
const snapshot = async () => ({
  tenants: await sql`
    select id, name, external_id, status, metadata, limits, updated_at, deactivated_at from tenants order by id`,
  keys: await sql`select id, status, expires_at, revoked_at from api_keys order by id`,
  events: await sql`select id from events order by id`,
})

t.test('atomic: when the event or the change cannot commit, neither does the other', async (t) => {
  const sub = (
    await gw.call(parent.apiKey, { method: 'POST', url: '/v1/sub-accounts', acting: 'self', body: { name: 'on' } })
  ).json()
  const off = (
    await gw.call(parent.apiKey, { method: 'POST', url: '/v1/sub-accounts', acting: 'self', body: { name: 'off' } })
  ).json()
  await gw.call(parent.apiKey, { method: 'POST', url: `/v1/sub-accounts/${off.id}/deactivate`, acting: 'self' })
  const key = (
    await gw.call(parent.apiKey, {
      method: 'POST',
      url: `/v1/sub-accounts/${sub.id}/api-keys`,
      acting: 'self',
      body: { name: 'k', scopes: ['a:b'] },
    })
  ).json()
  const changes: [string, 'POST' | 'PATCH', string, unknown?][] = [
    ['create', 'POST', '/v1/sub-accounts', { name: 'never' }],
    ['update', 'PATCH', `/v1/sub-accounts/${sub.id}`, { name: 'renamed', metadata: { a: 'b' } }],
    ['deactivate', 'POST', `/v1/sub-accounts/${sub.id}/deactivate`],
    ['reactivate', 'POST', `/v1/sub-accounts/${off.id}/reactivate`],
    ['mint', 'POST', `/v1/sub-accounts/${sub.id}/api-keys`, { name: 'never', scopes: ['a:b'] }],
    ['revoke', 'POST', `/v1/sub-accounts/${sub.id}/api-keys/${key.id}/revoke`],
    ['roll', 'POST', `/v1/sub-accounts/${sub.id}/api-keys/${key.id}/roll`],
  ]
  for (const [failing, tables] of [
    ['the event', ['events']],
    ['the change', ['tenants', 'api_keys']],
  ] as const) {
    const before = await snapshot()
    const undo = await failAtCommit([...tables])
    try {
      for (const [name, method, url, body] of changes) {
        const res = await gw.call(parent.apiKey, { method, url, acting: 'self', body })
        t.equal(res.statusCode, 500, `${failing} cannot commit: ${name} fails`)
      }
    } finally {
      await undo()
    }
    t.same(await snapshot(), before, `${failing} cannot commit: no change and no event`)
  }
})

t.test('changes at once: one event for each that changed, each after the one before it', async (t) => {
  const created = await change('POST', '/v1/sub-accounts', { name: 'race 0' })
  const id = created.res.json().id
  const seen = (await eventsOf(sql, parent.id)).length
  const call = (method: 'POST' | 'PATCH', url: string, body?: unknown) =>
    gw.call(parent.apiKey, { method, url, acting: 'self', body })
  const eight = <T>(make: (i: number) => Promise<T>) => Promise.all(Array.from({ length: 8 }, (_, i) => make(i)))

  const offs = await eight(() => call('POST', `/v1/sub-accounts/${id}/deactivate`))
  const renames = await eight((i) => call('PATCH', `/v1/sub-accounts/${id}`, { name: `race ${i + 1}` }))
  const key = (await call('POST', `/v1/sub-accounts/${id}/api-keys`, { name: 'k', scopes: ['orders:read'] })).json()
  const revokes = await eight(() => call('POST', `/v1/sub-accounts/${id}/api-keys/${key.id}/revoke`))
  t.same(
    [...offs, ...renames, ...revokes].map((res) => res.statusCode),
    Array(24).fill(200),
  )

  const events = await newEvents(sql, parent.id, seen)
  const count = (type: string) => events.filter((event) => event.type === type).length
  t.equal(count('sub_account.deactivated'), 1, 'eight deactivations at once: one event')
  t.equal(count('api_key.revoked'), 1, 'eight revocations at once: one event')
  const updates = events.filter((event) => event.type === 'sub_account.updated')
  t.equal(updates.length, 8, 'eight renames: eight events')
  // Each rename locked the row after the one before it had committed: what it saw before is
  // what the one before set, so the names chain from the first to the row as it is now.
  t.same(
    updates.map((event) => event.data.previous.name),
    ['race 0', ...updates.slice(0, -1).map((event) => event.data.object.name)],
    'each event saw the name the one before it wrote',
  )
  const [row] = await sql<{ name: string }[]>`select name from tenants where id = ${id}`
  t.equal(row?.name, updates.at(-1)?.data.object.name, 'the last event holds the row as it is')
})
