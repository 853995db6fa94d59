// The webhook delivery worker at its edges (docs/events.md, Delivery), against real Postgres and
// receivers on real sockets: a hanging receiver with a backlog does not hold every slot, nor does
// a parent with several, nor three such parents; recording
// an attempt does not deadlock with the endpoint's delete, nor with another attempt's 410, and
// an endpoint disabled is counted once; a stop after the answer came records it rather than have
// it sent again; a retry waits its delay after the failed attempt's end; a failure whose delivery
// was cancelled meanwhile names no next attempt.
import type { ServerResponse } from 'node:http'
import t, { type Test } from 'tap'
import { DEFAULT_PER_ENDPOINT, DEFAULT_PER_PARENT } from '../../src/webhooks/worker.js'
import { metricValue, startGateway, type TestGateway } from '../helpers/gateway.js'
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
  for (let i = 0; i < DEFAULT_PER_ENDPOINT + 8; i++) await createSub(gw, noisy.apiKey, `backlog ${i}`)
  t.ok(await until(5_000, async () => tarpit.deliveries.length >= DEFAULT_PER_ENDPOINT))
  await sleep(300)
  t.equal(tarpit.deliveries.length, DEFAULT_PER_ENDPOINT, 'no more attempts under way to it than its share')

  const quiet = await gw.createParent({ name: 'quiet' })
  const receiver = await startReceiver(t)
  await endpoint(gw, quiet.apiKey, receiver)
  await createSub(gw, quiet.apiKey, 'prompt')
  t.ok(await until(3_000, async () => receiver.deliveries.length === 1), "another parent's delivery is not held up")
})

t.test('a parent with several hanging receivers holds its share of the slots, not more', async (t) => {
  const gw = await gateway(t)
  const noisy = await gw.createParent({ name: 'noisy' })
  const tarpits: Receiver[] = []
  for (let i = 0; i < 4; i++) {
    const tarpit = await startReceiver(t)
    tarpit.answer(() => {})
    await endpoint(gw, noisy.apiKey, tarpit)
    tarpits.push(tarpit)
  }
  const underWay = () => tarpits.reduce((sum, tarpit) => sum + tarpit.deliveries.length, 0)
  // More than the parent's share over its four endpoints, and less than each endpoint's share.
  for (let i = 0; i < DEFAULT_PER_PARENT / 4 + 2; i++) await createSub(gw, noisy.apiKey, `backlog ${i}`)
  t.ok(await until(5_000, async () => underWay() >= DEFAULT_PER_PARENT))
  await sleep(300)
  t.equal(underWay(), DEFAULT_PER_PARENT, "no more attempts under way to the parent's endpoints than its share")

  const quiet = await gw.createParent({ name: 'quiet' })
  const receiver = await startReceiver(t)
  await endpoint(gw, quiet.apiKey, receiver)
  await createSub(gw, quiet.apiKey, 'prompt')
  t.ok(await until(3_000, async () => receiver.deliveries.length === 1), "another parent's delivery is not held up")
})

t.test("three parents whose receivers all hang leave another parent's delivery room", async (t) => {
  const gw = await gateway(t)
  // Every hanging attempt is held until the test lets it go; one cut (the 15 s timeout) is counted.
  const held: ServerResponse[] = []
  let cut = 0
  t.teardown(() => {
    for (const response of held) if (!response.writableEnded) response.writeHead(200).end('ok')
  })
  const hang = (receiver: Receiver) =>
    receiver.answer((_delivery, response) => {
      held.push(response)
      response.on('close', () => {
        if (!response.writableEnded) cut++
      })
    })
  const HANGING_PARENTS = 3
  const endpointsEach = DEFAULT_PER_PARENT / DEFAULT_PER_ENDPOINT
  for (let p = 0; p < HANGING_PARENTS; p++) {
    const noisy = await gw.createParent({ name: `noisy ${p}` })
    for (let e = 0; e < endpointsEach; e++) {
      const tarpit = await startReceiver(t)
      hang(tarpit)
      await endpoint(gw, noisy.apiKey, tarpit)
    }
    // Each sub-account queues one delivery per endpoint: a backlog past every endpoint's share.
    for (let i = 0; i < DEFAULT_PER_ENDPOINT + 2; i++) await createSub(gw, noisy.apiKey, `backlog ${p}.${i}`)
  }
  const fullShares = HANGING_PARENTS * DEFAULT_PER_PARENT
  t.ok(await until(30_000, async () => held.length >= fullShares), 'every hanging parent holds its whole share')
  t.equal(cut, 0, 'with none of their attempts cut short by the timeout')

  const quiet = await gw.createParent({ name: 'quiet' })
  const receiver = await startReceiver(t)
  await endpoint(gw, quiet.apiKey, receiver)
  await createSub(gw, quiet.apiKey, 'prompt')
  t.ok(await until(30_000, async () => receiver.deliveries.length === 1), "the other parent's delivery arrives")
  t.equal(cut, 0, 'while every hanging attempt is still under way')
  t.equal(held.length, fullShares, 'and no hanging parent got more than its share')
})

t.test('recording an attempt while its endpoint is deleted does not deadlock with the delete', async (t) => {
  const gw = await gateway(t)
  const parent = await gw.createParent()
  const receiver = await startReceiver(t)
  const held: ServerResponse[] = []
  receiver.answer((_delivery, response) => held.push(response))
  const id = await endpoint(gw, parent.apiKey, receiver)
  // A run of failures under way: the success clears it, a write to the endpoint's row.
  await gw.sql`update webhook_endpoints set failing_since = now() - interval '1 day' where id = ${id}`
  await createSub(gw, parent.apiKey, 'in flight')
  t.ok(await until(5_000, async () => held.length === 1), 'the attempt is under way')

  const waitingOnLocks = async () =>
    (
      await gw.sql`select count(*)::int as n from pg_stat_activity
        where datname = current_database() and wait_event_type = 'Lock'`
    )[0]!.n as number
  // DELETE's statements in its order (webhook-endpoint-changes.ts): the endpoint's row locked, then
  // its pending deliveries cancelled; the worker records the 200 in between.
  const cancelled = await gw.sql.begin(async (tx) => {
    await tx`select id from webhook_endpoints where id = ${id} for update`
    held[0]!.writeHead(200).end()
    t.ok(await until(5_000, async () => (await waitingOnLocks()) === 1), "the worker's record waits for the delete")
    const result = await tx`
      update webhook_deliveries set state = 'cancelled', next_attempt_at = null, lease_token = null
      where endpoint_id = ${id} and state = 'pending'`
    await tx`update webhook_endpoints set status = 'deleted', deleted_at = now(), secret_sealed = null where id = ${id}`
    return result.count
  })
  t.equal(cancelled, 1, 'the delete cancelled the delivery')
  t.ok(
    await until(5_000, async () => (await gw.sql`select 1 from webhook_attempts`).length === 1),
    'the attempt made is recorded all the same',
  )
  const [attempt] = await gw.sql`select attempt, status from webhook_attempts`
  t.match(attempt, { attempt: 1, status: 200 })
  t.same(
    (await gw.sql`select state from webhook_deliveries`).map((r) => r.state),
    ['cancelled'],
  )
})

t.test('attempts answered 410 at once are all recorded; the endpoint is disabled', async (t) => {
  const gw = await gateway(t)
  const parent = await gw.createParent()
  const receiver = await startReceiver(t)
  const held: ServerResponse[] = []
  receiver.answer((_delivery, response) => held.push(response))
  const id = await endpoint(gw, parent.apiKey, receiver)
  for (let i = 0; i < DEFAULT_PER_ENDPOINT + 2; i++) await createSub(gw, parent.apiKey, `gone ${i}`)
  t.ok(await until(5_000, async () => held.length === DEFAULT_PER_ENDPOINT), 'attempts under way')
  // Answered together: each record disables the endpoint and cancels the others' deliveries.
  for (const response of held) response.writeHead(410).end()
  t.ok(
    await until(5_000, async () => (await gw.sql`select 1 from webhook_attempts`).length === DEFAULT_PER_ENDPOINT),
    'every attempt made is recorded',
  )
  await sleep(1_500) // past deadlock_timeout: a deadlocked record would have lost its attempt by now
  const attempts = await gw.sql`select status from webhook_attempts`
  t.same(
    attempts.map((r) => r.status),
    Array(DEFAULT_PER_ENDPOINT).fill(410),
  )
  const [row] = await gw.sql`select status, disabled_reason from webhook_endpoints where id = ${id}`
  t.match(row, { status: 'disabled', disabled_reason: 'the endpoint answered 410 Gone' })
  const [pending] = await gw.sql`select count(*)::int as n from webhook_deliveries where state = 'pending'`
  t.equal(pending!.n, 0, 'nothing left to send to it')
  const counted = (outcome: string) => metricValue(gw.app, 'tgw_webhook_deliveries_total', { outcome })
  t.equal(await counted('endpoint_disabled'), 1, 'one endpoint disabled, counted once')
  t.equal(await counted('gave_up'), DEFAULT_PER_ENDPOINT - 1, 'the others ended their deliveries')
})

t.test('a stop after the answer came records it; it is not sent again', async (t) => {
  const gw = await gateway(t)
  const parent = await gw.createParent()
  const receiver = await startReceiver(t)
  // The status comes at once; the body never ends.
  receiver.answer((_delivery, response) => {
    response.writeHead(200)
    response.write('still writing')
  })
  await endpoint(gw, parent.apiKey, receiver)
  await createSub(gw, parent.apiKey, 'answered')
  t.ok(await until(5_000, async () => receiver.deliveries.length === 1))
  await sleep(200) // the status line and headers reach the worker
  await gw.app.webhookWorker.stop()
  const [delivery] = await gw.sql`select state, lease_token from webhook_deliveries`
  t.match(delivery, { state: 'succeeded', lease_token: null }, 'recorded, not handed back for a second send')
  t.same(
    (await gw.sql`select attempt, status from webhook_attempts`).map((r) => [r.attempt, r.status]),
    [[1, 200]],
  )
})

t.test("a retry's delay runs from the end of the failed attempt", async (t) => {
  const gw = await gateway(t, '300ms')
  const parent = await gw.createParent()
  const receiver = await startReceiver(t)
  // The first attempt takes 500 ms to fail; the second succeeds.
  receiver.answer((_delivery, response) => {
    if (receiver.deliveries.length === 1) setTimeout(() => response.writeHead(503).end(), 500)
    else response.writeHead(200).end()
  })
  await endpoint(gw, parent.apiKey, receiver)
  await createSub(gw, parent.apiKey, 'slow failure')
  t.ok(await until(5_000, async () => receiver.deliveries.length === 2))
  const gap = receiver.deliveries[1]!.receivedAt - receiver.deliveries[0]!.receivedAt
  t.ok(gap >= 500 + 280, `the retry came 300 ms after the 500 ms attempt ended, not at once: ${gap} ms`)
})

t.test('a failure whose endpoint was disabled meanwhile names no next attempt', async (t) => {
  const gw = await gateway(t)
  const parent = await gw.createParent()
  const receiver = await startReceiver(t)
  const held: ServerResponse[] = []
  receiver.answer((_delivery, response) => held.push(response))
  const id = await endpoint(gw, parent.apiKey, receiver)
  await createSub(gw, parent.apiKey, 'first')
  await createSub(gw, parent.apiKey, 'second')
  t.ok(await until(5_000, async () => held.length === 2), 'both attempts under way')
  held[0]!.writeHead(410).end()
  const disabled = async () => (await gw.sql`select status from webhook_endpoints where id = ${id}`)[0]!.status
  t.ok(await until(5_000, async () => (await disabled()) === 'disabled'), 'the 410 disabled the endpoint')
  held[1]!.writeHead(500).end()
  const page = async () =>
    (await gw.call(parent.apiKey, { method: 'GET', url: `${PATH}/${id}/deliveries`, acting: 'self' })).json()
  t.ok(await until(5_000, async () => (await page()).data.length === 2))
  const [latest] = (await page()).data
  t.match(latest, { status: 500, next_attempt_at: null }, 'its delivery was cancelled: no retry is to come')
  t.equal(await metricValue(gw.app, 'tgw_webhook_deliveries_total', { outcome: 'retrying' }), 0)
})
