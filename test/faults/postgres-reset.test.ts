// Postgres connections lost at awkward moments, through a relay that closes one connection at the
// moment it sends a given pattern, reset (a crashed peer, a NAT or firewall dropping its state) or
// closed in order (Postgres shutting down or terminating the backend, a failover, a proxy). The
// requirement throughout: nothing escapes to the process. An uncaught exception or an unhandled
// rejection ends the gateway (start.ts's stop rules, signals.ts, shut it down), and every in-process cache
// (the stale window of docs/internals.md) and every count not yet flushed goes with it, exactly
// when Postgres is in trouble. And requests go on, and usage arrives exactly once.
//   - in the middle of a usage flush (addUsage in src/store/usage.ts);
//   - during a new connection's first query;
//   - /readyz during a partition that ends in resets (its query times out, and is not cancelled).
import t, { type Test } from 'tap'
import { freshDatabase } from '../helpers/db.js'
import { createParent, startGateway } from '../helpers/gateway.js'
import { eventually, orTimeout, sleep } from '../helpers/poll.js'
import { startUpstream } from '../helpers/upstream.js'
import { watchCrashes } from './crashes.js'
import { postgresAddress, startRelay, viaPort } from './relay.js'
import { describeTimed, timedCall, type Timed } from './timed-call.js'

const crashes = watchCrashes(t)
const db = await freshDatabase(t)
const sql = db.sql
const relay = await startRelay(t, postgresAddress())
const upstream = await startUpstream(t)
const gw = await startGateway(t, {
  database: db,
  pool: { url: viaPort(db.url, relay.port) },
  redis: false,
  upstreamUrl: upstream.url,
  usageFlushIntervalMs: 50,
  // The tenant stays in-process: only the usage flush sends its id to Postgres (see below).
  cacheTimings: { localTtlMs: 60_000 },
  relays: [relay],
})

async function lostMidFlush(t: Test, how: 'rst' | 'fin'): Promise<void> {
  const parent = await createParent(sql, { name: `lost ${how}` })
  const usageTotal = async () =>
    (
      await sql<
        { n: number }[]
      >`select coalesce(sum(requests), 0)::int as n from usage_daily where tenant_id = ${parent.id}`
    )[0]!.n
  const crashesBefore = crashes.length
  let answered = 0
  const call = async () => {
    const res = await timedCall(gw.url, parent.apiKey, { path: '/orders' }, 10_000)
    if (res.res?.status === 200) answered++
    return res
  }
  for (let i = 0; i < 5; i++) t.equal((await call()).res?.status, 200, 'warm')
  t.not(await eventually(10_000, async () => (await usageTotal()) === 5, 20), null, 'the first flushes went through')

  // The next flush loses its connection as it sends its counts: after BEGIN and the batch id,
  // at the statement that adds the counts, whose parameters name the tenant (its text is a
  // prepared statement, not sent again). Nothing else names the tenant: it is cached in-process.
  const lost = relay.closeOn(parent.id, how)
  for (let i = 0; i < 10; i++) t.equal((await call()).res?.status, 200, 'a request whose count the next flush carries')
  t.ok(
    await orTimeout(
      lost.then(() => true),
      5_000,
      false,
    ),
    `the flush's connection was lost mid-transaction (${how})`,
  )
  await sleep(500)

  const escaped = crashes.slice(crashesBefore).map((crash) => `${crash.kind} ${crash.message} at ${crash.where}`)
  // postgres.js 3.4.9 could crash the process on a connection closed in order inside sql.begin()
  // (porsager/postgres#1208): the flush is one statement, not an explicit transaction.
  t.same(escaped, [], 'nothing escaped to the process (it would have ended the gateway)')

  // Requests go on, and every count arrives, once.
  for (let i = 0; i < 10; i++) {
    const res = await call()
    t.equal(res.res?.status, 200, `after the loss: ${describeTimed(res)}`)
  }
  let total = 0
  const took = await eventually(
    30_000,
    async () => {
      total = await usageTotal()
      return total >= answered
    },
    50,
  )
  t.not(took, null, `the counts reached Postgres (${total} of ${answered})`)
  await sleep(300)
  total = await usageTotal()
  t.equal(total, answered, `exactly once: ${answered} requests answered, ${total} counted`)
  t.comment(
    `${how}: counts complete ${took} ms after the loss; escaped: ${escaped.length === 0 ? 'nothing' : escaped.join('; ')}`,
  )
}

t.test('the connection is reset (RST)', (t) => lostMidFlush(t, 'rst'))
t.test('the connection is closed in order (FIN)', (t) => lostMidFlush(t, 'fin'))

// postgres.js (3.4.9) sends a new connection's first query, the array-type query of its default
// fetch_types, from a function whose promise it drops: a connection lost during it was an
// unhandled rejection. src/store/postgres-options.ts turns fetch_types off. Whatever a new connection's first
// query is, losing it must reach the request, not the process.
t.test('a new connection lost during its first query', async (t) => {
  const relay2 = await startRelay(t, postgresAddress())
  const fresh = await startGateway(t, {
    database: db,
    pool: { url: viaPort(db.url, relay2.port) },
    redis: false,
    upstreamUrl: upstream.url,
    usageFlushIntervalMs: 3_600_000,
    relays: [relay2],
  })
  const key = await createParent(sql, { name: 'first query' })
  const crashesBefore = crashes.length
  const lost = relay2.closeOn('select', 'rst')
  const first = await timedCall(fresh.url, key.apiKey, { path: '/orders' }, 15_000)
  t.ok(
    await orTimeout(
      lost.then(() => true),
      5_000,
      false,
    ),
    'the connection was lost during its first query',
  )
  t.ok(
    first.res !== null && [200, 503].includes(first.res.status),
    `the request that opened it is answered, 200 or 503 (${describeTimed(first)})`,
  )
  await sleep(300)
  const escaped = crashes.slice(crashesBefore).map((crash) => `${crash.kind} ${crash.message} at ${crash.where}`)
  t.same(escaped, [], 'nothing escaped to the process (it would have ended the gateway)')
  t.comment(`escaped: ${escaped.length === 0 ? 'nothing' : escaped.join('; ')}`)
  // After a failed lookup the gateway skips Postgres for a second (503 at once); then it serves.
  let next = await timedCall(fresh.url, key.apiKey, { path: '/orders' }, 15_000)
  for (let i = 0; i < 20 && next.res?.status === 503; i++) {
    await sleep(250)
    next = await timedCall(fresh.url, key.apiKey, { path: '/orders' }, 15_000)
  }
  t.equal(next.res?.status, 200, `a request is served again once the backoff is over (${describeTimed(next)})`)
})

const postgresCheck = (timed: Timed) =>
  (timed.res?.json() as { checks?: { postgres?: string } } | undefined)?.checks?.postgres

// /readyz gives Postgres 800 ms (src/ops/health.ts, through withDeadline() in src/store/db.ts, which
// cancels the query on its timeout). During a partition a kubelet probes it every few seconds.
t.test('/readyz during a partition that ends in resets', async (t) => {
  const partition = await startRelay(t, postgresAddress())
  const probed = await startGateway(t, {
    database: db,
    pool: { url: viaPort(db.url, partition.port) },
    redis: false,
    upstreamUrl: upstream.url,
    usageFlushIntervalMs: 3_600_000,
    relays: [partition],
  })
  const before = await timedCall(probed.url, null, { path: '/readyz' }, 5_000)
  t.equal(
    before.res?.status,
    200,
    `ready before the partition (${describeTimed(before)}); its pool now holds an open connection`,
  )

  partition.blackhole()
  const crashesBefore = crashes.length
  const during = await timedCall(probed.url, null, { path: '/readyz' }, 5_000)
  // Postgres was reached before: still ready, the body names the outage (docs/operations.md).
  t.equal(during.res?.status, 200, `/readyz: 200 during the partition (${describeTimed(during)})`)
  t.equal(postgresCheck(during), 'down', '/readyz: checks.postgres down during the partition')
  // Then the partition ends in resets (a firewall that starts rejecting, the host back without
  // the connections' state), as partitions often do.
  await sleep(200)
  await partition.cut('rst')
  await sleep(500)
  const escaped = crashes.slice(crashesBefore).map((crash) => `${crash.kind} ${crash.message} at ${crash.where}`)
  // withDeadline() (src/store/db.ts) does not cancel a query past its deadline: postgres.js would open a
  // connection for the CancelRequest and reject, to no one, when that one failed.
  t.same(escaped, [], 'nothing escaped to the process (it would have ended the gateway)')
  t.comment(`escaped after one /readyz in the partition: ${escaped.length === 0 ? 'nothing' : escaped.join('; ')}`)

  await partition.restore()
  const back = await eventually(
    30_000,
    async () => postgresCheck(await timedCall(probed.url, null, { path: '/readyz' }, 5_000)) === 'ok',
    100,
  )
  t.not(back, null, `checks.postgres ok again once the partition heals (${back} ms)`)
})
