// PATCH /v1/sub-accounts/webhook-endpoints/{id} (docs/api.md, Webhook endpoints): a change of URL,
// event types, description or status, under the rules of creation, with its event; a change to
// what is there writes none; refusals say what to do.
import t from 'tap'
import { eventsOf } from '../helpers/events.js'
import { startGateway } from '../helpers/gateway.js'
import { problemOf } from '../helpers/problems.js'

const PATH = '/v1/sub-accounts/webhook-endpoints'
let urls = 0
// A public address literal: the URL rules pass it without asking a resolver.
const uniqueUrl = () => `https://1.1.1.1/hooks/update-${++urls}`

const gw = await startGateway(t, { listen: false })
const parent = await gw.createParent()
const other = await gw.createParent({ name: 'other' })
const sql = gw.sql

const as = (apiKey: string, method: 'GET' | 'POST' | 'PATCH', url: string, body?: unknown, headers = {}) =>
  gw.call(apiKey, { method, url, acting: 'self', headers, ...(body === undefined ? {} : { body }) })
const create = async (body: Record<string, unknown> = {}) => {
  const res = await as(parent.apiKey, 'POST', PATH, { url: uniqueUrl(), event_types: ['api_key.*'], ...body })
  if (res.statusCode !== 201) throw new Error(res.body)
  return res.json()
}
const patch = (id: string, body: unknown, apiKey = parent.apiKey, headers = {}) =>
  as(apiKey, 'PATCH', `${PATH}/${id}`, body, headers)
const updates = async (id: string) =>
  (await eventsOf(sql, parent.id)).filter((e) => e.type === 'webhook_endpoint.updated' && e.target.id === id)

t.test('url, event types and description: 200, the endpoint as it is now, one event', async (t) => {
  const made = await create({ description: 'ops' })
  const url = uniqueUrl()
  const res = await patch(made.id, { url, event_types: ['sub_account.*', 'api_key.revoked'], description: null })
  t.equal(res.statusCode, 200, res.body)
  const changed = res.json()
  const { secret: _secret, ...shown } = made
  t.same(changed, {
    ...shown,
    url,
    event_types: ['sub_account.*', 'api_key.revoked'],
    description: null,
  })
  t.notOk('secret' in changed, 'no secret')
  t.same((await as(parent.apiKey, 'GET', `${PATH}/${made.id}`)).json(), changed, 'GET shows it')
  const [event, more] = await updates(made.id)
  t.notOk(more, 'one event')
  t.match(event, {
    actor: { type: 'api_key', key_id: parent.keyId },
    target: { type: 'webhook_endpoint', id: made.id },
    data: {
      object: changed,
      previous: { url: made.url, event_types: ['api_key.*'], description: 'ops' },
    },
  })
  t.notOk('status' in (event!.data as { previous: object }).previous, 'previous: the changed fields only')
  t.notMatch(JSON.stringify(event), /whsec_/, 'no secret in the event')

  // The new subscription is the one deliveries follow: a sub-account event is queued for it.
  await as(parent.apiKey, 'POST', '/v1/sub-accounts', { name: 'for the hook' })
  const [queued] = await sql`
    select count(*)::int as n from webhook_deliveries d join events e on e.id = d.event_id
    where d.endpoint_id = ${made.id} and e.type = 'sub_account.created'`
  t.equal(queued!.n, 1, 'a sub_account.created delivery queued for it')
})

t.test('the same values again: 200 and no event', async (t) => {
  const made = await create({ description: 'same' })
  const res = await patch(made.id, { url: made.url, event_types: made.event_types, description: 'same' })
  t.equal(res.statusCode, 200, res.body)
  t.same(await updates(made.id), [], 'no event')
})

t.test('status: disabled stops deliveries and cancels the pending; active resumes', async (t) => {
  const made = await create({ event_types: ['sub_account.*'] })
  await as(parent.apiKey, 'POST', '/v1/sub-accounts', { name: 'pending one' })
  const pending = async () =>
    (
      await sql`select count(*)::int as n from webhook_deliveries where endpoint_id = ${made.id} and state = 'pending'`
    )[0]!.n
  t.equal(await pending(), 1, 'one delivery pending')

  const off = await patch(made.id, { status: 'disabled' })
  t.equal(off.statusCode, 200, off.body)
  t.match(off.json(), { status: 'disabled', disabled_at: String, disabled_reason: 'disabled by its parent' })
  t.equal(await pending(), 0, 'the pending delivery cancelled')
  await as(parent.apiKey, 'POST', '/v1/sub-accounts', { name: 'not sent' })
  const [{ n: all }] =
    (await sql`select count(*)::int as n from webhook_deliveries where endpoint_id = ${made.id}`) as [{ n: number }]
  t.equal(all, 1, 'nothing queued while disabled')
  const test = await as(parent.apiKey, 'POST', `${PATH}/${made.id}/test`)
  t.equal(test.statusCode, 409, 'no test send while disabled')

  const on = await patch(made.id, { status: 'active' })
  t.equal(on.statusCode, 200, on.body)
  t.match(on.json(), { status: 'active', disabled_at: null, disabled_reason: null })
  await as(parent.apiKey, 'POST', '/v1/sub-accounts', { name: 'sent again' })
  t.equal(await pending(), 1, 'the next event is queued')

  const [disabled, enabled] = await updates(made.id)
  t.match(disabled?.data, { object: { status: 'disabled' }, previous: { status: 'active', disabled_at: null } })
  t.match(enabled?.data, {
    object: { status: 'active', disabled_reason: null },
    previous: { status: 'disabled', disabled_reason: 'disabled by its parent' },
  })
})

t.test('an endpoint the worker disabled (a 410) can be enabled again', async (t) => {
  const made = await create()
  await sql`update webhook_endpoints set status = 'disabled', disabled_at = now(),
            disabled_reason = 'the receiver answered 410', failing_since = now() where id = ${made.id}`
  const res = await patch(made.id, { status: 'active' })
  t.equal(res.statusCode, 200, res.body)
  t.match(res.json(), { status: 'active', disabled_at: null, disabled_reason: null })
  const [row] = await sql`select failing_since from webhook_endpoints where id = ${made.id}`
  t.equal(row!.failing_since, null, 'its run of failures forgotten')
})

t.test('the URL rules of creation: 400 on /body/url, nothing changed, no event', async (t) => {
  const made = await create()
  for (const [url, reason] of [
    ['http://1.1.1.1/hook', /must use https/],
    ['https://127.0.0.1/hook', /loopback/],
    ['https://10.0.0.1/hook', /private/],
    ['https://169.254.169.254/latest/meta-data', /metadata/],
    ['not a url', /not a valid absolute URL/],
  ] as const) {
    const res = await patch(made.id, { url })
    t.equal(res.statusCode, 400, url)
    const problem = problemOf(res)
    t.equal(problem.code, 'validation_failed', url)
    t.equal(problem.errors?.[0]?.path, '/body/url', url)
    t.match(problem.errors?.[0]?.message, reason, url)
  }
  t.equal((await as(parent.apiKey, 'GET', `${PATH}/${made.id}`)).json().url, made.url, 'url kept')
  t.same(await updates(made.id), [], 'no event')
})

t.test("another endpoint's URL: 409 url_conflict; the endpoint's own, spelt otherwise: 200", async (t) => {
  const first = await create()
  const second = await create()
  const res = await patch(second.id, { url: first.url })
  t.equal(res.statusCode, 409)
  t.equal(problemOf(res).code, 'url_conflict')
  t.match(problemOf(res).detail, first.id)
  const own = await patch(second.id, { url: second.url.replace('https://', 'HTTPS://') })
  t.equal(own.statusCode, 200, `${own.body}: its own URL conflicts with nothing`)
})

t.test('body refusals: empty, unknown field, bad type or status, no event type', async (t) => {
  const made = await create()
  const refusals: [unknown, string][] = [
    [{}, ''],
    [{ secret: 'whsec_x' }, ''],
    [{ event_types: [] }, '/body/event_types'],
    [{ event_types: ['api_key.deleted'] }, '/body/event_types/0'],
    [{ status: 'paused' }, '/body/status'],
    [{ description: 'x'.repeat(501) }, '/body/description'],
  ]
  for (const [body, path] of refusals) {
    const res = await patch(made.id, body)
    t.equal(res.statusCode, 400, JSON.stringify(body))
    const problem = problemOf(res)
    t.equal(problem.code, 'validation_failed', JSON.stringify(body))
    if (path !== '') t.equal(problem.errors?.[0]?.path, path, JSON.stringify(body))
    t.ok((problem.errors?.[0]?.message ?? '').length > 0, 'says what is wrong')
  }
  t.same(await updates(made.id), [], 'no event')
})

t.test("404 for unknown, malformed, deleted and another parent's endpoints", async (t) => {
  const made = await create()
  const theirs = (
    await as(other.apiKey, 'POST', PATH, { url: 'https://1.1.1.1/hooks/theirs', event_types: ['api_key.*'] })
  ).json()
  await gw.call(parent.apiKey, { method: 'DELETE', url: `${PATH}/${made.id}`, acting: 'self' })
  for (const id of [made.id, theirs.id, '00000000-0000-4000-8000-000000000000', 'nope']) {
    const res = await patch(id, { description: 'x' })
    t.equal(res.statusCode, 404, id)
    t.equal(problemOf(res).code, 'not_found', id)
  }
})

t.test('an Idempotency-Key replay changes once', async (t) => {
  const made = await create()
  const headers = { 'idempotency-key': 'patch-once' }
  const first = await patch(made.id, { description: 'once' }, parent.apiKey, headers)
  const again = await patch(made.id, { description: 'once' }, parent.apiKey, headers)
  t.equal(first.statusCode, 200)
  t.equal(again.statusCode, 200)
  t.equal(again.headers['idempotent-replayed'], 'true')
  t.equal((await updates(made.id)).length, 1, 'one event')
})
