// Webhook endpoints of a parent (docs/api.md, Webhook endpoints): create with a secret shown once
// and kept only sealed, the URL rules, event types, list, get, delete, their events, and an
// Idempotency-Key replay of a create.
import t from 'tap'
import { open } from '../../src/encryption/seal.js'
import { sealedSecretFor } from '../../src/webhooks/signature.js'
import { checkNoSecrets, eventsOf } from '../helpers/events.js'
import { TEST_ENCRYPTION_KEY } from '../helpers/encryption-key.js'
import { startGateway, type TestGateway } from '../helpers/gateway.js'
import { problemOf } from '../helpers/problems.js'

const PATH = '/v1/sub-accounts/webhook-endpoints'
// A public address literal: the URL rules pass it without asking a resolver.
const PUBLIC_URL = 'https://1.1.1.1/hooks/gateway'
// A parent registers a URL once (409 url_conflict): each endpoint of these tests has its own.
let urls = 0
const uniqueUrl = () => `https://1.1.1.1/hooks/${++urls}`

const gw = await startGateway(t, { listen: false })
const parent = await gw.createParent()
const other = await gw.createParent({ name: 'other' })
const sql = gw.sql

const as = (
  apiKey: string,
  method: 'GET' | 'POST' | 'DELETE',
  url: string,
  body?: unknown,
  headers: Record<string, string> = {},
  on: TestGateway = gw,
) => on.call(apiKey, { method, url, acting: 'self', headers, ...(body === undefined ? {} : { body }) })

const create = (body: unknown, apiKey = parent.apiKey) => as(apiKey, 'POST', PATH, body)
const endpointCount = async () => Number((await sql`select count(*)::int as n from webhook_endpoints`)[0]!.n)
const SECRET = /^whsec_[A-Za-z0-9+/]{43}=$/

t.test('create: 201, Location, no-store, the secret once; stored only sealed', async (t) => {
  const res = await create({ url: PUBLIC_URL, event_types: ['api_key.*', 'sub_account.created'], description: 'ops' })
  t.equal(res.statusCode, 201, res.body)
  const made = res.json()
  t.equal(res.headers.location, `${PATH}/${made.id}`)
  t.equal(res.headers['cache-control'], 'no-store')
  t.match(made, {
    id: /^[0-9a-f-]{36}$/,
    url: PUBLIC_URL,
    event_types: ['api_key.*', 'sub_account.created'],
    description: 'ops',
    status: 'active',
    created_at: String,
    disabled_at: null,
    disabled_reason: null,
  })
  t.match(made.secret, SECRET)
  t.equal(Buffer.from(made.secret.slice('whsec_'.length), 'base64').length, 32, 'base64 of 32 bytes')

  const got = await as(parent.apiKey, 'GET', res.headers.location as string)
  t.equal(got.statusCode, 200)
  const { secret: _secret, ...shown } = made
  t.same(got.json(), shown, 'GET: the endpoint without its secret')
  const listed = (await as(parent.apiKey, 'GET', PATH)).json()
  t.same(
    listed.data.find((e: { id: string }) => e.id === made.id),
    shown,
    'list: without its secret',
  )
  t.notMatch(got.body + JSON.stringify(listed), /whsec_/, 'no secret in GET or list')

  // The whole row, every column as text, holds neither the secret nor its key, in any spelling.
  const key = Buffer.from(made.secret.slice('whsec_'.length), 'base64')
  const [row] =
    await sql`select to_jsonb(w)::text as text, secret_sealed from webhook_endpoints w where id = ${made.id}`
  const spellings = [made.secret, made.secret.slice(6), key.toString('hex'), key.toString('base64url')]
  t.same(
    spellings.filter((s) => row!.text.includes(s)),
    [],
    'the row shows no spelling of the secret',
  )
  t.notOk((row!.secret_sealed as Buffer).includes(key), 'the sealed bytes do not hold the key')
  t.notOk((row!.secret_sealed as Buffer).includes(Buffer.from(made.secret)), 'nor the secret')
  const opened = open(Buffer.from(TEST_ENCRYPTION_KEY, 'base64'), row!.secret_sealed, sealedSecretFor(made.id), 'x')
  t.equal(opened.toString('utf8'), made.secret, 'it opens under ENCRYPTION_KEY to the secret')

  const events = (await eventsOf(sql, parent.id)).filter((e) => e.target.id === made.id)
  t.match(events, [
    {
      type: 'webhook_endpoint.created',
      actor: { type: 'api_key', key_id: parent.keyId },
      target: { type: 'webhook_endpoint', id: made.id },
      data: { object: shown, previous: null },
    },
  ])
  t.same(events[0]!.data.object, shown, 'the event object is the endpoint as shown, without the secret')
  await checkNoSecrets(t, sql, spellings)
})

t.test('URL refusals: 400 validation_failed on /body/url, nothing stored', async (t) => {
  const before = await endpointCount()
  const eventsBefore = (await eventsOf(sql, parent.id)).length
  const cases: [string, RegExp][] = [
    ['http://1.1.1.1/hook', /must use https/],
    ['https://127.0.0.1/hook', /loopback/],
    ['https://10.0.0.1/hook', /private/],
    ['https://169.254.169.254/latest/meta-data', /metadata/],
    ['https://[::1]/hook', /loopback/],
    ['https://localhost:8443/hook', /loopback/],
    ['https://user:pw@1.1.1.1/hook', /user or password/],
    ['not a url', /not a valid absolute URL/],
    ['https://1.1.1.1/\u0000', /./],
  ]
  for (const [url, reason] of cases) {
    const res = await create({ url, event_types: ['api_key.*'] })
    // Quoted: a raw NUL in the test output makes grep read the whole log as binary.
    const what = JSON.stringify(url)
    t.equal(res.statusCode, 400, what)
    const problem = problemOf(res)
    t.equal(problem.code, 'validation_failed', what)
    t.equal(problem.errors?.[0]?.path, '/body/url', what)
    t.match(problem.errors?.[0]?.message, reason, what)
  }
  t.equal(await endpointCount(), before, 'no endpoint stored')
  t.equal((await eventsOf(sql, parent.id)).length, eventsBefore, 'no event written')
})

t.test('special-purpose addresses (IANA registries, SIIT, Azure host): 400, nothing stored', async (t) => {
  const before = await endpointCount()
  const cases: [string, RegExp][] = [
    ['https://[::ffff:0:7f00:1]/hook', /IPv4-translated \(SIIT\)/],
    ['https://198.18.0.1/hook', /benchmarking/],
    ['https://192.0.2.1/hook', /documentation/],
    ['https://192.0.0.170/hook', /IETF protocol assignment/],
    ['https://192.88.99.1/hook', /6to4 relay/],
    ['https://168.63.129.16/hook', /Azure host/],
    ['https://[2001:db8::1]/hook', /documentation/],
    ['https://[100::1]/hook', /discard-only/],
    ['https://[2001:20::1]/hook', /ORCHIDv2/],
    ['https://[fec0::1]/hook', /site-local/],
    ['https://[64:ff9b::c612:1]/hook', /NAT64 address of 198\.18\.0\.1/],
    ['https://[::ffff:203.0.113.9]/hook', /IPv4-mapped address of 203\.0\.113\.9/],
  ]
  for (const [url, reason] of cases) {
    const res = await create({ url, event_types: ['api_key.*'] })
    t.equal(res.statusCode, 400, url)
    const problem = problemOf(res)
    t.equal(problem.code, 'validation_failed', url)
    t.equal(problem.errors?.[0]?.path, '/body/url', url)
    t.match(problem.errors?.[0]?.message, reason, url)
  }
  t.equal(await endpointCount(), before, 'no endpoint stored')
  for (const url of ['https://198.20.0.1/hook', 'https://[2001:4860:4860::8888]/hook']) {
    const res = await create({ url, event_types: ['api_key.*'] })
    t.equal(res.statusCode, 201, `${url}: a public address just outside passes`)
  }
})

t.test('WEBHOOKS_ALLOW_INSECURE=true allows http to a loopback address', async (t) => {
  const insecure = await startGateway(t, { listen: false, env: { WEBHOOKS_ALLOW_INSECURE: 'true' } })
  const p = await insecure.createParent()
  const res = await as(
    p.apiKey,
    'POST',
    PATH,
    { url: 'http://127.0.0.1:9/hook', event_types: ['api_key.*'] },
    {},
    insecure,
  )
  t.equal(res.statusCode, 201, res.body)
  t.equal(res.json().url, 'http://127.0.0.1:9/hook')
})

t.test('event_types: a non-empty list of catalogue types or <resource>.*', async (t) => {
  const before = await endpointCount()
  const refused: [unknown, string][] = [
    [[], '/body/event_types'],
    [['nope.created'], '/body/event_types/0'],
    [['api_key.created', 'api_key.exploded'], '/body/event_types/1'],
    [['*'], '/body/event_types/0'],
    [['api_key'], '/body/event_types/0'],
    [['nope.*'], '/body/event_types/0'],
    [['api_key.*', 'api_key.*'], '/body/event_types'],
    ['api_key.*', '/body/event_types'],
  ]
  for (const [eventTypes, path] of refused) {
    const res = await create({ url: uniqueUrl(), event_types: eventTypes })
    t.equal(res.statusCode, 400, JSON.stringify(eventTypes))
    const problem = problemOf(res)
    t.equal(problem.code, 'validation_failed')
    t.ok(
      problem.errors?.some((e) => e.path === path),
      `${JSON.stringify(eventTypes)}: ${JSON.stringify(problem.errors)}`,
    )
  }
  const missing = await create({ url: uniqueUrl() })
  t.equal(problemOf(missing).code, 'validation_failed', 'event_types is required')
  const unknownField = await create({ url: uniqueUrl(), event_types: ['api_key.*'], secret: 'whsec_mine' })
  t.equal(problemOf(unknownField).code, 'validation_failed', 'no secret of the caller')
  t.equal(await endpointCount(), before, 'none stored')
  const every = await create({ url: uniqueUrl(), event_types: ['webhook_endpoint.*', 'account.limits_updated'] })
  t.equal(every.statusCode, 201, every.body)
})

t.test('list: oldest first, paged with signed cursors, the parent own only', async (t) => {
  const p = await gw.createParent({ name: 'lister' })
  const ids: string[] = []
  for (const n of [1, 2, 3]) {
    const res = await create({ url: `${PUBLIC_URL}/${n}`, event_types: ['api_key.*'] }, p.apiKey)
    ids.push(res.json().id)
  }
  await create({ url: uniqueUrl(), event_types: ['api_key.*'] }, other.apiKey)
  const first = (await as(p.apiKey, 'GET', `${PATH}?limit=2`)).json()
  t.same(
    first.data.map((e: { id: string }) => e.id),
    ids.slice(0, 2),
  )
  t.type(first.next_cursor, 'string')
  const second = (await as(p.apiKey, 'GET', `${PATH}?limit=2&cursor=${first.next_cursor}`)).json()
  t.same(
    second.data.map((e: { id: string }) => e.id),
    ids.slice(2),
  )
  t.equal(second.next_cursor, null)
  const foreign = await as(other.apiKey, 'GET', `${PATH}?limit=2&cursor=${first.next_cursor}`)
  t.equal(problemOf(foreign).code, 'validation_failed', "another parent's cursor is refused")
  const bad = await as(p.apiKey, 'GET', `${PATH}?limit=101`)
  t.equal(problemOf(bad).code, 'validation_failed')
})

t.test('list: by seq as a number, 10 after 9', async (t) => {
  // A database of its own, so that the endpoints' seq runs 1 to 11: read as text
  // (`seq::text as seq`), the order must still be the column's, or '10' sorts before '9'.
  const fresh = await startGateway(t, { listen: false })
  const p = await fresh.createParent()
  const ids: string[] = []
  for (let n = 1; n <= 11; n++) {
    const res = await as(p.apiKey, 'POST', PATH, { url: `${PUBLIC_URL}/${n}`, event_types: ['api_key.*'] }, {}, fresh)
    ids.push(res.json().id)
  }
  const seen: string[] = []
  let cursor: string | null = null
  do {
    const page: { data: { id: string }[]; next_cursor: string | null } = (
      await as(p.apiKey, 'GET', `${PATH}?limit=4${cursor === null ? '' : `&cursor=${cursor}`}`, undefined, {}, fresh)
    ).json()
    seen.push(...page.data.map((e) => e.id))
    cursor = page.next_cursor
  } while (cursor !== null)
  t.same(seen, ids, 'every endpoint once, oldest first')
})

t.test("get and delete: 404 for unknown, malformed and another parent's", async (t) => {
  const made = (await create({ url: uniqueUrl(), event_types: ['sub_account.*'] })).json()
  const item = `${PATH}/${made.id}`
  for (const url of [`${PATH}/00000000-0000-4000-8000-000000000000`, `${PATH}/not-a-uuid`]) {
    t.equal(problemOf(await as(parent.apiKey, 'GET', url)).code, 'not_found', url)
    t.equal(problemOf(await as(parent.apiKey, 'DELETE', url)).code, 'not_found', url)
  }
  t.equal(problemOf(await as(other.apiKey, 'GET', item)).code, 'not_found', "another parent's: GET")
  t.equal(problemOf(await as(other.apiKey, 'DELETE', item)).code, 'not_found', "another parent's: DELETE")
  t.equal((await as(parent.apiKey, 'GET', item.toUpperCase().replace(PATH.toUpperCase(), PATH))).statusCode, 200)
  const [row] = await sql`select status from webhook_endpoints where id = ${made.id}`
  t.equal(row!.status, 'active', "another parent's DELETE changed nothing")
})

t.test('delete: 204, then 404; the event shows it deleted, without its secret', async (t) => {
  const res = await create({ url: uniqueUrl(), event_types: ['api_key.revoked'], description: 'bye' })
  const made = res.json()
  const item = `${PATH}/${made.id}`
  const seen = (await eventsOf(sql, parent.id)).length
  const deleted = await as(parent.apiKey, 'DELETE', item)
  t.equal(deleted.statusCode, 204)
  t.equal(deleted.body, '')
  t.equal(problemOf(await as(parent.apiKey, 'GET', item)).code, 'not_found', 'GET after delete')
  t.equal(problemOf(await as(parent.apiKey, 'DELETE', item)).code, 'not_found', 'DELETE again')
  const listed = (await as(parent.apiKey, 'GET', `${PATH}?limit=100`)).json()
  t.notOk(
    listed.data.some((e: { id: string }) => e.id === made.id),
    'not listed',
  )
  const [row] = await sql`select status, deleted_at, secret_sealed from webhook_endpoints where id = ${made.id}`
  t.match(row, { status: 'deleted', deleted_at: Date, secret_sealed: null }, 'kept as deleted, its secret dropped')

  const events = (await eventsOf(sql, parent.id)).slice(seen)
  const { secret: _secret, ...shown } = made
  t.equal(events.length, 1, 'one event; the repeated DELETE wrote none')
  t.match(events[0], {
    type: 'webhook_endpoint.deleted',
    target: { type: 'webhook_endpoint', id: made.id },
    data: { previous: { status: 'active' } },
  })
  t.same(events[0]!.data.object, { ...shown, status: 'deleted' }, 'the endpoint as it was, with status deleted')
  await checkNoSecrets(t, sql, [made.secret, made.secret.slice(6)])
})

t.test('an Idempotency-Key replay of the create returns the same secret; one endpoint', async (t) => {
  const p = await gw.createParent({ name: 'idempotent' })
  const body = { url: uniqueUrl(), event_types: ['api_key.*'] }
  const first = await as(p.apiKey, 'POST', PATH, body, { 'idempotency-key': 'create-hook-1' })
  const again = await as(p.apiKey, 'POST', PATH, body, { 'idempotency-key': 'create-hook-1' })
  t.equal(first.statusCode, 201)
  t.equal(again.statusCode, 201)
  t.equal(again.headers['idempotent-replayed'], 'true')
  t.equal(again.headers.location, first.headers.location)
  t.equal(again.headers['cache-control'], 'no-store')
  t.same(again.json(), first.json(), 'the same endpoint and secret')
  const rows = await sql`select id from webhook_endpoints where account_id = ${p.id}`
  t.equal(rows.length, 1, 'one endpoint')
  const created = (await eventsOf(sql, p.id)).filter((e) => e.type === 'webhook_endpoint.created')
  t.equal(created.length, 1, 'one event')
})

/** Refuses, at commit, any write to `table` (a deferred constraint trigger); returns its undo. */
async function failAtCommit(table: string): Promise<() => Promise<void>> {
  await sql.unsafe(`
    create or replace function tgw_test_refuse() returns trigger language plpgsql as $$
    begin raise exception 'refused at commit'; end $$`)
  await sql.unsafe(`
    create constraint trigger refuse_${table} after insert or update on ${table}
      deferrable initially deferred for each row execute function tgw_test_refuse()`)
  return () => sql.unsafe(`drop trigger refuse_${table} on ${table}`).then(() => {})
}

t.test('atomic: when the event or the change cannot commit, neither does the other', async (t) => {
  const p = await gw.createParent({ name: 'atomic' })
  const kept = (await create({ url: uniqueUrl(), event_types: ['api_key.*'] }, p.apiKey)).json()
  const snapshot = async () => ({
    endpoints: await sql`select id, status, deleted_at, secret_sealed from webhook_endpoints order by id`,
    events: await sql`select id from events order by id`,
  })
  for (const table of ['events', 'webhook_endpoints']) {
    const before = await snapshot()
    const undo = await failAtCommit(table)
    try {
      const made = await create({ url: uniqueUrl(), event_types: ['api_key.*'] }, p.apiKey)
      t.equal(made.statusCode, 500, `${table} cannot commit: the create fails`)
      const deleted = await as(p.apiKey, 'DELETE', `${PATH}/${kept.id}`)
      t.equal(deleted.statusCode, 500, `${table} cannot commit: the delete fails`)
    } finally {
      await undo()
    }
    t.same(await snapshot(), before, `${table} cannot commit: no change and no event`)
  }
})

t.test('a disabled endpoint (the delivery worker sets it) is shown so, and deleted from that status', async (t) => {
  const made = (await create({ url: uniqueUrl(), event_types: ['api_key.*'] })).json()
  await sql`
    update webhook_endpoints set status = 'disabled', disabled_at = now(), disabled_reason = 'the receiver answered 410'
    where id = ${made.id}`
  const got = (await as(parent.apiKey, 'GET', `${PATH}/${made.id}`)).json()
  t.match(got, { status: 'disabled', disabled_at: String, disabled_reason: 'the receiver answered 410' })
  const listed = (await as(parent.apiKey, 'GET', `${PATH}?limit=100`)).json()
  t.ok(
    listed.data.some((e: { id: string; status: string }) => e.id === made.id && e.status === 'disabled'),
    'listed, as disabled',
  )
  t.equal((await as(parent.apiKey, 'DELETE', `${PATH}/${made.id}`)).statusCode, 204)
  const [event] = (await eventsOf(sql, parent.id)).filter(
    (e) => e.type === 'webhook_endpoint.deleted' && e.target.id === made.id,
  )
  t.match(event?.data, {
    object: { status: 'deleted', disabled_reason: 'the receiver answered 410' },
    previous: { status: 'disabled' },
  })
})
