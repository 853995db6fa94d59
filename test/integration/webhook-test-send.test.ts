// A test send and a delivery's resend (docs/api.md, Webhook endpoints), with the worker and a real
// receiver: POST …/webhook-endpoints/{id}/test queues a webhook_endpoint.test event for that
// endpoint only, signed like any delivery and listed with its type; POST …/deliveries/{event_id}/retry
// sends it again as one more attempt; unknown ids are 404, a disabled endpoint 409.
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { eventually, sleep } from '../helpers/poll.js'
import { startReceiver } from '../helpers/webhook-receiver.js'

const PATH = '/v1/sub-accounts/webhook-endpoints'
const gw = await startGateway(t, {
  env: { WEBHOOKS_ALLOW_INSECURE: 'true' },
  webhookDelivery: { pollIntervalMs: 50 },
})
const parent = await gw.createParent()
const other = await gw.createParent({ name: 'other' })

const post = (url: string, body?: unknown, apiKey = parent.apiKey) =>
  gw.call(apiKey, { method: 'POST', url, acting: 'self', ...(body === undefined ? {} : { body }) })
const get = (url: string, apiKey = parent.apiKey) => gw.call(apiKey, { method: 'GET', url, acting: 'self' })

async function until(check: () => boolean | Promise<boolean>, what: string): Promise<void> {
  if ((await eventually(10_000, async () => await check(), 50)) === null) throw new Error(`never: ${what}`)
}

const receiver = await startReceiver(t)
const bystander = await startReceiver(t, '/bystander')
const made = await post(PATH, { url: receiver.url, event_types: ['sub_account.created'] })
if (made.statusCode !== 201) throw new Error(made.body)
const endpoint = made.json()
receiver.secret(endpoint.secret)
// Subscribed to every webhook_endpoint event: a test send to the other one must not reach it.
const watching = await post(PATH, { url: bystander.url, event_types: ['webhook_endpoint.*'] })
if (watching.statusCode !== 201) throw new Error(watching.body)

let testEventId = ''

t.test('a test send: 202, delivered to that endpoint only, signed, listed with its type', async (t) => {
  const res = await post(`${PATH}/${endpoint.id}/test`)
  t.equal(res.statusCode, 202, res.body)
  const sent = res.json()
  t.match(sent, { event_id: /^evt_[0-9A-Z]{26}$/, type: 'webhook_endpoint.test' })
  testEventId = sent.event_id
  await until(() => receiver.deliveries.length === 1, 'the receiver got the test event')
  const [got] = receiver.deliveries
  t.equal(got!.id, sent.event_id, 'its webhook-id is the event id')
  t.match(
    got!.verified,
    {
      type: 'webhook_endpoint.test',
      data: { id: sent.event_id, data: { object: { id: endpoint.id, url: receiver.url } } },
    },
    'the event, its object the endpoint',
  )
  t.ok(got!.verified, 'signed with the endpoint secret')

  await until(async () => {
    const listed = (await get(`${PATH}/${endpoint.id}/deliveries`)).json()
    return listed.data.length === 1 && listed.data[0].status === 200
  }, 'the attempt listed')
  const [attempt] = (await get(`${PATH}/${endpoint.id}/deliveries`)).json().data
  t.match(attempt, { event_id: sent.event_id, event_type: 'webhook_endpoint.test', attempt: 1, status: 200 })

  const events = (await get(`/v1/sub-accounts/events?type=webhook_endpoint.test`)).json()
  t.equal(events.data.length, 1, 'in the audit log')
  t.match(events.data[0], { id: sent.event_id, target: { type: 'webhook_endpoint', id: endpoint.id } })

  await sleep(300)
  t.equal(bystander.deliveries.length, 1, 'the other endpoint heard only of its own creation')
  t.notOk(
    bystander.deliveries.some((d) => d.id === sent.event_id),
    'never the test event, though it subscribes to webhook_endpoint.*',
  )
})

t.test('a resend: 202, one more attempt of the same event, listed', async (t) => {
  const res = await post(`${PATH}/${endpoint.id}/deliveries/${testEventId}/retry`)
  t.equal(res.statusCode, 202, res.body)
  t.match(res.json(), { event_id: testEventId, attempt: 2, next_attempt_at: String, queued: true })
  await until(() => receiver.deliveries.length === 2, 'the receiver got it again')
  t.equal(receiver.deliveries[1]!.id, testEventId, 'the same webhook-id: a receiver can tell a resend')
  t.ok(receiver.deliveries[1]!.verified, 'signed')
  await until(async () => (await get(`${PATH}/${endpoint.id}/deliveries`)).json().data.length === 2, 'listed')
  const [newest] = (await get(`${PATH}/${endpoint.id}/deliveries`)).json().data
  t.match(newest, { event_id: testEventId, event_type: 'webhook_endpoint.test', attempt: 2, status: 200 })
})

t.test('unknown ids are 404; another parent sees nothing; a disabled endpoint is 409', async (t) => {
  const missing = '00000000-0000-4000-8000-000000000000'
  const notFound: [url: string, what: string][] = [
    [`${PATH}/${missing}/test`, 'an unknown endpoint'],
    [`${PATH}/not-a-uuid/test`, 'an endpoint id that is not a UUID'],
    [`${PATH}/${missing}/deliveries/${testEventId}/retry`, 'an unknown endpoint, to resend'],
    [`${PATH}/${endpoint.id}/deliveries/evt_01JD0000000000000000000000/retry`, 'an event it has no delivery of'],
    [`${PATH}/${endpoint.id}/deliveries/not-an-event/retry`, 'an event id that is none'],
    [`${PATH}/${watching.json().id}/deliveries/${testEventId}/retry`, "another endpoint's event"],
  ]
  for (const [url, what] of notFound) {
    const res = await post(url)
    t.equal(res.statusCode, 404, what)
    t.equal(res.json().code, 'not_found', what)
  }
  const foreign = await post(`${PATH}/${endpoint.id}/test`, undefined, other.apiKey)
  t.equal(foreign.statusCode, 404, "another parent's endpoint")
  const before = receiver.deliveries.length

  await gw.sql`update webhook_endpoints set status = 'disabled', disabled_at = now(), disabled_reason = 'test'
    where id = ${endpoint.id}`
  for (const url of [`${PATH}/${endpoint.id}/test`, `${PATH}/${endpoint.id}/deliveries/${testEventId}/retry`]) {
    const res = await post(url)
    t.equal(res.statusCode, 409, url)
    t.equal(res.json().code, 'endpoint_disabled', url)
  }
  await sleep(300)
  t.equal(receiver.deliveries.length, before, 'nothing sent')
})
