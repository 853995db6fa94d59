// Usage is never lost or doubled (docs/api.md, docs/internals.md, docs/operations.md): N proxied
// requests across two instances that share Postgres and Redis, one of them restarted gracefully in
// the middle of the load (app.close() with requests in flight, then a new instance on the same
// database), come out as exactly N in usage_daily and in the usage report, per sub-account. The
// meter flushes often (every few milliseconds), so that flushes interleave with the load, with the
// close and with the other instance's flushes; and once more with the default second, so that the
// flush at close carries a second's worth.
//
// N is what the clients were answered, and it is checked against what the upstream received: a
// request that failed at the connection (sent to the instance as it closed) was never served.
// The graceful restart of a real process on SIGTERM is test/integration/shutdown.test.ts.
import { Agent } from 'node:http'
import t, { type Test } from 'tap'
import { createSubAccount } from '../../src/store/tenants.js'
import { freshDatabase } from '../helpers/db.js'
import { createParent, startGateway, type TestGateway } from '../helpers/gateway.js'
import { getOverAgent } from '../helpers/http.js'
import { eventually, sleep } from '../helpers/poll.js'
import { holdingUpstream } from '../helpers/upstream.js'
import { startRedis } from '../helpers/own-redis.js'
import { timedCall } from './timed-call.js'

const WORKERS = 12
const LOAD_MS = 1_200
const HELD = 3

const redis = await startRedis(t)

interface Answer {
  status: number
  tenant: string | undefined
}

/** One GET over `agent`, read to its end; rejects on a connection error. */
async function get(base: string, agent: Agent, path: string, headers: Record<string, string>): Promise<Answer> {
  const response = await getOverAgent(base, agent, path, headers)
  if (!response.complete) throw new Error('incomplete response')
  let tenant: string | undefined
  try {
    tenant = (JSON.parse(response.body.toString('utf8')) as { headers: Record<string, string> }).headers[
      'x-service-resolved-tenant'
    ]
  } catch {
    tenant = undefined
  }
  return { status: response.status, tenant }
}

async function scenario(t: Test, usageFlushIntervalMs: number): Promise<void> {
  const db = await freshDatabase(t)
  const sql = db.sql
  // Echoes what it got after a few milliseconds; /hold/* waits for release().
  const upstream = await holdingUpstream(t, { holdPrefix: '/hold/', delayMs: [2, 12] })
  const prefix = `tgw_faults_usage_${usageFlushIntervalMs}:`
  const start = (): Promise<TestGateway> =>
    startGateway(t, {
      database: db,
      pool: {},
      redis: redis.url,
      redisKeyPrefix: prefix,
      upstreamUrl: upstream.url,
      usageFlushIntervalMs,
    })

  const parent = await createParent(sql, { name: 'usage' })
  const subs = [
    await createSubAccount(sql, parent.id, { name: 'one', externalId: 'one', metadata: {} }),
    await createSubAccount(sql, parent.id, { name: 'two', externalId: 'two', metadata: {} }),
  ]

  const a = await start()
  const b = await start()
  // The instances a load balancer sends to: b leaves it when its close begins, its successor
  // joins once it listens.
  const targets: string[] = [a.url, b.url]

  const answered: Answer[] = []
  const failures: string[] = []
  let stop = false
  const agents: Agent[] = []
  t.teardown(() => {
    for (const agent of agents) agent.destroy()
  })

  async function worker(w: number): Promise<void> {
    // One keep-alive connection per instance, as a load balancer's pool would hold.
    const pool = new Map<string, Agent>()
    for (let n = 0; !stop; n++) {
      const base = targets[(w + n) % targets.length]!
      let agent = pool.get(base)
      if (agent === undefined) {
        agent = new Agent({ keepAlive: true, maxSockets: 1 })
        agents.push(agent)
        pool.set(base, agent)
      }
      const sub = subs[(w + n) % 2]!
      const acting = n % 3 === 0 ? `ext:${sub.external_id}` : sub.id
      try {
        answered.push(
          await get(base, agent, `/v1/load/${w}/${n}`, {
            authorization: `Bearer ${parent.apiKey}`,
            'x-service-acting-tenant': acting,
          }),
        )
      } catch (err) {
        // Sent to the instance that was closing: never served (checked below against the upstream).
        failures.push(`${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`)
      }
    }
  }
  const workers = Array.from({ length: WORKERS }, (_, w) => worker(w))
  await sleep(LOAD_MS)

  // Requests certain to be in flight at b's close: the upstream holds them until it has begun.
  const holdAgent = new Agent({ keepAlive: true, maxSockets: HELD })
  agents.push(holdAgent)
  const held = Array.from({ length: HELD }, (_, i) =>
    get(b.url, holdAgent, `/hold/${i}`, {
      authorization: `Bearer ${parent.apiKey}`,
      'x-service-acting-tenant': subs[i % 2]!.id,
    }),
  )
  t.not(
    await eventually(10_000, async () => upstream.held() === HELD),
    null,
    'the held requests reached the upstream through b',
  )

  targets.splice(targets.indexOf(b.url), 1)
  const closing = b.close()
  // Once the listener is gone, the close has begun; then the held requests are answered.
  t.not(await eventually(10_000, async () => !b.app.server.listening), null, "b's close has begun")
  upstream.release()
  const heldAnswers = await Promise.all(held)
  await closing
  t.same(
    heldAnswers.map((answer) => answer.status),
    Array(HELD).fill(200),
    'the requests in flight at the close were answered 200',
  )
  answered.push(...heldAnswers)

  const b2 = await start()
  targets.push(b2.url)
  await sleep(LOAD_MS)
  stop = true
  await Promise.all(workers)

  // Every count reaches Postgres: the meters flush on their own (no close needed).
  await eventually(10_000, async () => a.app.usageMeter.lagMs() === 0 && b2.app.usageMeter.lagMs() === 0, 20)
  await a.app.usageMeter.flush()
  await b2.app.usageMeter.flush()

  const n = answered.length
  t.ok(n > 100, `a real load: ${n} requests answered (${failures.length} failed at the connection during the restart)`)
  t.same(
    answered.filter((answer) => answer.status !== 200).map((answer) => answer.status),
    [],
    'every answer was 200',
  )
  t.equal(
    upstream.received.length,
    n,
    'the upstream received exactly the answered requests: nothing failed after reaching it',
  )

  const expected = Object.fromEntries(
    subs.map((sub) => [sub.id, answered.filter((answer) => answer.tenant === sub.id).length]),
  )
  t.equal(
    Object.values(expected).reduce((x, y) => x + y, 0),
    n,
    'each answer named one of the two sub-accounts',
  )

  const rows = await sql<{ tenant_id: string; status_class: number; n: number }[]>`
    select tenant_id, status_class, sum(requests)::int as n from usage_daily group by tenant_id, status_class order by tenant_id`
  const inTable = Object.fromEntries(rows.map((row) => [row.tenant_id, row.n]))
  t.same(inTable, expected, `usage_daily holds exactly N = ${n}, per sub-account (nothing lost, nothing doubled)`)
  t.ok(
    rows.every((row) => row.status_class === 2),
    'all of it 2xx',
  )

  const report = await timedCall(a.url, parent.apiKey, { path: '/v1/sub-accounts/usage' }, 10_000)
  t.equal(report.res?.status, 200, 'the usage report answers')
  const data = (report.res?.json() as { data: { sub_account_id: string; requests: number }[] } | undefined)?.data ?? []
  t.same(
    Object.fromEntries(data.map((entry) => [entry.sub_account_id, entry.requests])),
    expected,
    'and reports exactly N, per sub-account',
  )
  t.comment(
    `flush every ${usageFlushIntervalMs} ms: ${n} answered (${HELD} held across b's close), ${failures.length} refused at the connection (${[...new Set(failures)].join(', ') || 'none'})`,
  )
}

t.test('the meter flushing every 10 ms', (t) => scenario(t, 10))
t.test('the meter flushing every second (the default)', (t) => scenario(t, 1_000))
