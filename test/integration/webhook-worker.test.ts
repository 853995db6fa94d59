// The webhook delivery worker (docs/events.md, Delivery), against real Postgres and receivers on
// real sockets: a committed change reaches the endpoints that subscribe to it, signed (checked with
// the `standardwebhooks` package); the retry schedule (shortened); 410 and five days of failures
// (on a moved clock) disable the endpoint; redirects are not followed; the deliveries route.
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
// @ts-expect-error: the documented example is plain JavaScript, without types
import { verifyWebhook } from '../../docs/examples/verify-webhook.mjs'
import { metricValue, startGateway, type TestGateway } from '../helpers/gateway.js'
import { until } from '../helpers/poll.js'
import { type Receiver, startReceiver } from '../helpers/webhook-receiver.js'

const PATH = '/v1/sub-accounts/webhook-endpoints'
const DAY_MS = 86_400_000

async function gateway(t: Test, options: { schedule?: string; clock?: () => number } = {}) {
  return startGateway(t, {
    listen: false,
    env: { WEBHOOKS_ALLOW_INSECURE: 'true', WEBHOOKS_RETRY_SCHEDULE: options.schedule ?? '50ms,100ms' },
    webhookDelivery: { pollIntervalMs: 25, ...(options.clock ? { clock: options.clock } : {}) },
  })
}

async function endpoint(gw: TestGateway, apiKey: string, receiver: Receiver, eventTypes = ['sub_account.*']) {
  const res = await gw.call(apiKey, {
    method: 'POST',
    url: PATH,
    acting: 'self',
    body: { url: receiver.url, event_types: eventTypes },
  })
  if (res.statusCode !== 201) throw new Error(res.body)
  const made = res.json()
  receiver.secret(made.secret)
  return made.id as string
}

const createSub = async (gw: TestGateway, apiKey: string, name: string) => {
  const res = await gw.call(apiKey, { method: 'POST', url: '/v1/sub-accounts', acting: 'self', body: { name } })
  if (res.statusCode !== 201) throw new Error(res.body)
  return res.json().id as string
}

const deliveriesOf = async (gw: TestGateway, apiKey: string, id: string, query = '') => {
  const res = await gw.call(apiKey, { method: 'GET', url: `${PATH}/${id}/deliveries${query}`, acting: 'self' })
  return res
}

t.test('a committed change is delivered, signed, with the event as the audit log shows it', async (t) => {
  const gw = await gateway(t)
  const parent = await gw.createParent()
  const receiver = await startReceiver(t)
  const keysOnly = await startReceiver(t)
  const id = await endpoint(gw, parent.apiKey, receiver)
  const secret = receiver.secretValue()
  await endpoint(gw, parent.apiKey, keysOnly, ['api_key.*'])
  const subId = await createSub(gw, parent.apiKey, 'delivered')
  t.ok(await until(5_000, async () => receiver.deliveries.length === 1), 'one delivery')
  const [got] = receiver.deliveries
  t.ok(got?.verified, 'the signature verifies with standardwebhooks')
  const log = (await gw.call(parent.apiKey, { method: 'GET', url: '/v1/sub-accounts/events', acting: 'self' })).json()
  const event = log.data.find((e: { type: string }) => e.type === 'sub_account.created')
  t.same(got?.verified, { type: 'sub_account.created', timestamp: event.created_at, data: event })
  t.equal(got?.id, event.id, 'webhook-id is the event id')
  t.equal(event.target.id, subId)
  t.equal(keysOnly.deliveries.length, 0, 'an endpoint that does not subscribe gets nothing')
  t.same(verifyWebhook(secret, got!.headers, got!.body), got!.verified, "docs/events.md's check by hand agrees")
  t.throws(() => verifyWebhook(secret, got!.headers, got!.body.replace('created', 'updated')), /does not match/)
  const stale = { ...got!.headers, 'webhook-timestamp': String(Math.floor(Date.now() / 1000) - 600) }
  t.throws(() => verifyWebhook(secret, stale, got!.body), /too old/)

  t.ok(await until(5_000, async () => (await deliveriesOf(gw, parent.apiKey, id)).json().data.length === 1))
  const page = await deliveriesOf(gw, parent.apiKey, id)
  t.equal(page.statusCode, 200)
  t.match(page.json(), {
    data: [{ event_id: event.id, attempt: 1, status: 200, error: null, next_attempt_at: null }],
    next_cursor: null,
  })
  t.equal(await metricValue(gw.app, 'tgw_webhook_deliveries_total', { outcome: 'succeeded' }), 1)
})

t.test('failures are retried on the schedule, then given up; the route pages the attempts', async (t) => {
  const gw = await gateway(t, { schedule: '50ms,200ms' })
  const parent = await gw.createParent()
  const receiver = await startReceiver(t)
  receiver.answer((_d, response) => response.writeHead(503).end())
  const id = await endpoint(gw, parent.apiKey, receiver)
  await createSub(gw, parent.apiKey, 'failing')
  t.ok(await until(5_000, async () => receiver.deliveries.length === 3), 'three attempts')
  t.ok(await until(5_000, async () => (await deliveriesOf(gw, parent.apiKey, id)).json().data.length === 3))
  await new Promise((resolve) => setTimeout(resolve, 400))
  t.equal(receiver.deliveries.length, 3, 'no fourth attempt: given up')
  const gaps = receiver.deliveries.slice(1).map((d, i) => d.receivedAt - receiver.deliveries[i]!.receivedAt)
  t.ok(gaps[0]! >= 45 && gaps[1]! >= 195, `waited the schedule between attempts: ${gaps}`)
  t.equal(new Set(receiver.deliveries.map((d) => d.id)).size, 1, 'one webhook-id for every attempt')

  const first = (await deliveriesOf(gw, parent.apiKey, id, '?limit=2')).json()
  t.match(first.data, [
    { attempt: 3, status: 503, error: 'HTTP 503', next_attempt_at: null },
    { attempt: 2, status: 503 },
  ])
  const second = (await deliveriesOf(gw, parent.apiKey, id, `?limit=2&cursor=${first.next_cursor}`)).json()
  t.match(second, { data: [{ attempt: 1, status: 503 }], next_cursor: null })
  const retryAt = Date.parse(second.data[0].next_attempt_at) - Date.parse(second.data[0].attempted_at)
  t.ok(retryAt >= 50 && retryAt < 1_000, `attempt 1 names when attempt 2 is due (+${retryAt} ms)`)
  const rows = await gw.sql`select state from webhook_deliveries`
  t.same(
    rows.map((r) => r.state),
    ['failed'],
  )
  t.equal(await metricValue(gw.app, 'tgw_webhook_deliveries_total', { outcome: 'gave_up' }), 1)
  t.equal(await metricValue(gw.app, 'tgw_webhook_deliveries_total', { outcome: 'retrying' }), 2)

  const other = await gw.createParent({ name: 'other' })
  t.equal((await deliveriesOf(gw, other.apiKey, id)).statusCode, 404, "another parent's endpoint is not found")
  const forged = await deliveriesOf(gw, parent.apiKey, id, '?cursor=AAAAAAAAAAEAAAAAAAAAAAAAAAAAAAAA')
  t.equal(forged.statusCode, 400)
})

t.test('a 410 disables the endpoint at once; nothing more is sent to it', async (t) => {
  const gw = await gateway(t, { schedule: '10s' })
  const parent = await gw.createParent()
  const receiver = await startReceiver(t)
  let answered = 0
  receiver.answer((_d, response) => response.writeHead(answered++ === 0 ? 500 : 410).end())
  const id = await endpoint(gw, parent.apiKey, receiver)
  await createSub(gw, parent.apiKey, 'first')
  t.ok(await until(5_000, async () => receiver.deliveries.length === 1))
  await createSub(gw, parent.apiKey, 'second')
  t.ok(await until(5_000, async () => receiver.deliveries.length === 2))
  t.ok(
    await until(
      5_000,
      async () => (await gw.sql`select 1 from webhook_endpoints where status = 'disabled'`).length === 1,
    ),
  )
  const shown = (await gw.call(parent.apiKey, { method: 'GET', url: `${PATH}/${id}`, acting: 'self' })).json()
  t.match(shown, { status: 'disabled', disabled_reason: 'the endpoint answered 410 Gone' })
  t.ok(shown.disabled_at)
  const states = await gw.sql`select state from webhook_deliveries order by id`
  t.same(
    states.map((r) => r.state),
    ['cancelled', 'failed'],
    "the first event's pending retry is cancelled",
  )
  await createSub(gw, parent.apiKey, 'third')
  await new Promise((resolve) => setTimeout(resolve, 300))
  t.equal(receiver.deliveries.length, 2, 'nothing after the 410')
  t.equal((await gw.sql`select count(*)::int as n from webhook_deliveries`)[0]!.n, 2, 'nothing queued for it')
  t.equal(await metricValue(gw.app, 'tgw_webhook_deliveries_total', { outcome: 'endpoint_disabled' }), 1)
})

t.test('five days of nothing but failures disable the endpoint; a success resets the count', async (t) => {
  let offset = 0
  const gw = await gateway(t, { schedule: '1h', clock: () => Date.now() + offset })
  const parent = await gw.createParent()
  const receiver = await startReceiver(t)
  let status = 500
  receiver.answer((_d, response) => response.writeHead(status).end())
  const id = await endpoint(gw, parent.apiKey, receiver)
  const failingSince = async () => (await gw.sql`select failing_since from webhook_endpoints`)[0]!.failing_since
  await createSub(gw, parent.apiKey, 'a')
  t.ok(await until(5_000, async () => (await failingSince()) !== null), 'failing from the first failure')

  offset = 3 * DAY_MS
  status = 200
  await createSub(gw, parent.apiKey, 'b')
  t.ok(await until(5_000, async () => (await failingSince()) === null), 'a success ends the run')

  status = 500
  await createSub(gw, parent.apiKey, 'c')
  t.ok(await until(5_000, async () => (await failingSince()) !== null))
  offset += 4 * DAY_MS
  await createSub(gw, parent.apiKey, 'd')
  t.ok(await until(5_000, async () => receiver.deliveries.length >= 5), 'the hour-old retry and d both sent')
  const shown = async () =>
    (await gw.call(parent.apiKey, { method: 'GET', url: `${PATH}/${id}`, acting: 'self' })).json()
  t.equal((await shown()).status, 'active', 'four days of failures are not five')

  offset += DAY_MS + 60_000
  await createSub(gw, parent.apiKey, 'e')
  t.ok(await until(5_000, async () => (await shown()).status === 'disabled'), 'five days: disabled')
  t.equal((await shown()).disabled_reason, 'every delivery failed for 5 days')
})

t.test('a redirect is not followed', async (t) => {
  const gw = await gateway(t)
  const parent = await gw.createParent()
  const elsewhere = await startReceiver(t)
  const receiver = await startReceiver(t)
  receiver.answer((_d, response) => response.writeHead(307, { location: elsewhere.url }).end())
  const id = await endpoint(gw, parent.apiKey, receiver)
  await createSub(gw, parent.apiKey, 'redirected')
  t.ok(await until(5_000, async () => (await deliveriesOf(gw, parent.apiKey, id)).json().data.length === 3))
  t.equal(elsewhere.deliveries.length, 0, 'the redirect target never hears of it')
  const [last] = (await deliveriesOf(gw, parent.apiKey, id)).json().data
  t.match(last, { status: 307, error: 'HTTP 307: redirects are not followed' })
})

t.test('a deleted endpoint gets nothing more; its pending retries are cancelled', async (t) => {
  const gw = await gateway(t, { schedule: '300ms' })
  const parent = await gw.createParent()
  const receiver = await startReceiver(t)
  receiver.answer((_d, response) => response.writeHead(500).end())
  const id = await endpoint(gw, parent.apiKey, receiver)
  await createSub(gw, parent.apiKey, 'soon deleted')
  t.ok(await until(5_000, async () => receiver.deliveries.length === 1))
  const res = await gw.call(parent.apiKey, { method: 'DELETE', url: `${PATH}/${id}`, acting: 'self' })
  t.equal(res.statusCode, 204)
  await new Promise((resolve) => setTimeout(resolve, 500))
  t.equal(receiver.deliveries.length, 1, 'the retry is not made')
  t.same(
    (await gw.sql`select state from webhook_deliveries`).map((r) => r.state),
    ['cancelled'],
  )
})

t.test('the age of the oldest due delivery is a metric', async (t) => {
  let offset = 0
  const gw = await gateway(t, { clock: () => Date.now() + offset })
  const parent = await gw.createParent()
  const receiver = await startReceiver(t)
  await endpoint(gw, parent.apiKey, receiver)
  const age = () => metricValue(gw.app, 'tgw_webhook_oldest_due_seconds')
  t.equal(await age(), 0, 'nothing due')
  await gw.app.webhookWorker.stop()
  await createSub(gw, parent.apiKey, 'waiting')
  offset = 90_000
  const waited = await age()
  t.ok(waited >= 89 && waited < 120, `waited about 90 s on the moved clock: ${waited}`)
  t.equal(receiver.deliveries.length, 0)
})

t.test('docs/events.md shows the example of a check by hand, byte for byte', async (t) => {
  const doc = readFileSync(fileURLToPath(new URL('../../docs/events.md', import.meta.url)), 'utf8')
  const shown = /```js\n(\/\/ Verifying a tenancy-gateway webhook by hand[\s\S]*?)```/.exec(doc)?.[1]
  const example = readFileSync(
    fileURLToPath(new URL('../../docs/examples/verify-webhook.mjs', import.meta.url)),
    'utf8',
  )
  t.equal(shown, example)
})
