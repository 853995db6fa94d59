// The webhook delivery worker at its edges (docs/events.md, Delivery), against real Postgres and
// receivers on real sockets: a hanging receiver with a backlog does not hold every slot.
import t, { type Test } from 'tap'
import { DEFAULT_PER_ENDPOINT } from '../../src/webhooks/worker.js'
import { startGateway, type TestGateway } from '../helpers/gateway.js'
import { sleep, until } from '../helpers/poll.js'
import { type Receiver, startReceiver } from '../helpers/webhook-receiver.js'

const PATH = '/v1/sub-accounts/webhook-endpoints'

async function gateway(t: Test, schedule = '1h') {
  return startGateway(t, {
    listen: false,
    env: { WEBHOOKS_ALLOW_INSECURE: 'true', WEBHOOKS_RETRY_SCHEDULE: schedule },
    webhookDelivery: { pollIntervalMs: 25 },
  })
}

async function endpoint(gw: TestGateway, apiKey: string, receiver: Receiver) {
  const res = await gw.call(apiKey, {
    method: 'POST',
    url: PATH,
    acting: 'self',
    body: { url: receiver.url, event_types: ['sub_account.*'] },
  })
  if (res.statusCode !== 201) throw new Error(res.body)
  receiver.secret(res.json().secret)
  return res.json().id as string
}

const createSub = async (gw: TestGateway, apiKey: string, name: string) => {
  const res = await gw.call(apiKey, { method: 'POST', url: '/v1/sub-accounts', acting: 'self', body: { name } })
  if (res.statusCode !== 201) throw new Error(res.body)
}

t.test("a hanging receiver with a backlog holds its share of the slots, not another parent's", async (t) => {
  const gw = await gateway(t)
  const tarpit = await startReceiver(t)
  tarpit.answer(() => {}) // never answers: each attempt waits out the 15 s timeout
  const noisy = await gw.createParent({ name: 'noisy' })
  await endpoint(gw, noisy.apiKey, tarpit)
  for (let i = 0; i < 24; i++) await createSub(gw, noisy.apiKey, `backlog ${i}`)
  t.ok(await until(5_000, async () => tarpit.deliveries.length >= DEFAULT_PER_ENDPOINT))
  await sleep(300)
  t.equal(tarpit.deliveries.length, DEFAULT_PER_ENDPOINT, 'no more attempts under way to it than its share')

  const quiet = await gw.createParent({ name: 'quiet' })
  const receiver = await startReceiver(t)
  await endpoint(gw, quiet.apiKey, receiver)
  await createSub(gw, quiet.apiKey, 'prompt')
  t.ok(await until(3_000, async () => receiver.deliveries.length === 1), "another parent's delivery is not held up")
})
