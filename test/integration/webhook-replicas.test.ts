// Webhook delivery by several replicas of one deployment (docs/events.md, Delivery): each attempt
// is made by exactly one replica (FOR UPDATE SKIP LOCKED and a lease), none is lost, and a replica
// killed mid-delivery leaves its attempt to another once the lease runs out.
import { type ChildProcess, fork } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { DEFAULT_LEASE_MS } from '../../src/webhooks/worker.js'
import { metricValue, startGateway, type TestGateway } from '../helpers/gateway.js'
import { until } from '../helpers/poll.js'
import { startReceiver } from '../helpers/webhook-receiver.js'
import { RUN_TYPESCRIPT } from '../helpers/typescript.js'

const PATH = '/v1/sub-accounts/webhook-endpoints'
const env = { WEBHOOKS_ALLOW_INSECURE: 'true', WEBHOOKS_RETRY_SCHEDULE: '50ms' }

const createSub = async (gw: TestGateway, apiKey: string, name: string) => {
  const res = await gw.call(apiKey, { method: 'POST', url: '/v1/sub-accounts', acting: 'self', body: { name } })
  if (res.statusCode !== 201) throw new Error(res.body)
}

t.test('two replicas deliver 200 events: each attempt once, none lost', async (t) => {
  const a = await startGateway(t, { listen: false, env, webhookDelivery: { pollIntervalMs: 200 } })
  const b = await startGateway(t, {
    listen: false,
    env,
    database: a.database,
    webhookDelivery: { pollIntervalMs: 200 },
  })
  const parent = await a.createParent()
  const receiver = await startReceiver(t)
  // The first attempt at each event fails, the second succeeds: every event is sent exactly twice.
  const seen = new Set<string>()
  receiver.answer((delivery, response) => {
    const first = !seen.has(delivery.id)
    seen.add(delivery.id)
    response.writeHead(first ? 500 : 204).end()
  })
  const made = await a.call(parent.apiKey, {
    method: 'POST',
    url: PATH,
    acting: 'self',
    body: { url: receiver.url, event_types: ['sub_account.created'] },
  })
  receiver.secret(made.json().secret)

  for (let batch = 0; batch < 20; batch++) {
    await Promise.all(
      Array.from({ length: 10 }, (_, i) => createSub(i % 2 === 0 ? a : b, parent.apiKey, `sub ${batch}-${i}`)),
    )
  }
  const done = await until(30_000, async () => {
    const [row] = await a.sql`select count(*)::int as n from webhook_deliveries where state = 'succeeded'`
    return row!.n === 200
  })
  t.ok(done, 'all 200 delivered')
  const counts = receiver.countsById()
  t.equal(counts.size, 200, '200 webhook-ids')
  const notTwice = [...counts].filter(([, n]) => n !== 2)
  t.same(notTwice, [], 'each arrived exactly twice: once per attempt')
  t.equal(
    receiver.deliveries.filter((d) => d.verified === null).length,
    0,
    'every signature verifies with standardwebhooks',
  )
  const [attempts] = await a.sql`select count(*)::int as n from webhook_attempts`
  t.equal(attempts!.n, 400, 'every attempt recorded once')
  const made_ = async (gw: TestGateway) =>
    (await metricValue(gw.app, 'tgw_webhook_deliveries_total', { outcome: 'succeeded' })) +
    (await metricValue(gw.app, 'tgw_webhook_deliveries_total', { outcome: 'retrying' }))
  const [byA, byB] = [await made_(a), await made_(b)]
  t.equal(byA + byB, 400, `the attempts were shared: ${byA} by one replica, ${byB} by the other`)
})

t.test('a replica killed mid-delivery does not lose its attempt', async (t) => {
  const receiver = await startReceiver(t)
  let held = 0
  // The first request is held unanswered: the replica that sent it is killed meanwhile.
  receiver.answer((_delivery, response) => {
    if (held++ === 0) return
    response.writeHead(200).end()
  })
  const db = await startGateway(t, { listen: false, env, webhookDelivery: { pollIntervalMs: 3_600_000 } })
  // That first gateway only sets the database up: its worker is stopped before any event exists.
  await db.app.webhookWorker.stop()
  const parent = await db.createParent()

  const script = fileURLToPath(new URL('../helpers/webhook-replica-process.ts', import.meta.url))
  const child: ChildProcess = fork(script, [], {
    execArgv: [...RUN_TYPESCRIPT],
    env: { ...process.env, DATABASE_URL: db.database.url },
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  })
  t.teardown(() => child.kill('SIGKILL'))
  const port = await new Promise<number>((resolve, reject) => {
    child.once('message', (message: { port: number }) => resolve(message.port))
    child.once('exit', (code) => reject(new Error(`the replica exited (${code})`)))
  })
  const at = `http://127.0.0.1:${port}`
  const post = (path: string, body: unknown) =>
    fetch(`${at}${path}`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${parent.apiKey}`,
        'x-service-acting-tenant': 'self',
        'content-type': 'application/json',
      },
      body: JSON.stringify(body),
    })
  const made = await post(PATH, { url: receiver.url, event_types: ['sub_account.created'] })
  const body = (await made.json()) as { secret: string }
  t.equal(made.status, 201, JSON.stringify(body))
  receiver.secret(body.secret)
  t.equal((await post('/v1/sub-accounts', { name: 'in flight' })).status, 201)
  t.ok(await until(10_000, async () => receiver.deliveries.length === 1), 'the replica sent it')
  child.kill('SIGKILL')
  await new Promise((resolve) => child.once('exit', resolve))
  const [claimed] = await db.sql`select state, attempt, lease_token from webhook_deliveries`
  t.match(claimed, { state: 'pending', attempt: 1 }, 'still claimed by the dead replica')
  t.ok(claimed!.lease_token)

  // Another replica, its clock past the dead one's lease (instead of waiting it out).
  const other = await startGateway(t, {
    listen: false,
    env,
    database: db.database,
    webhookDelivery: { pollIntervalMs: 50, clock: () => Date.now() + DEFAULT_LEASE_MS + 1_000 },
  })
  await other.app.ready() // its worker starts when the app is ready
  t.ok(await until(10_000, async () => receiver.deliveries.length === 2), 'sent again by the other replica')
  t.equal(receiver.deliveries[1]!.id, receiver.deliveries[0]!.id, 'the same webhook-id')
  t.ok(receiver.deliveries[1]!.verified)
  t.ok(
    await until(5_000, async () => {
      const [row] = await db.sql`select state from webhook_deliveries`
      return row!.state === 'succeeded'
    }),
  )
  const attempts = await db.sql`select attempt, status from webhook_attempts`
  t.same(
    attempts.map((r) => [r.attempt, r.status]),
    [[1, 200]],
    'attempt 1, made once to completion',
  )
  t.equal(await metricValue(other.app, 'tgw_webhook_deliveries_total', { outcome: 'succeeded' }), 1)
})
