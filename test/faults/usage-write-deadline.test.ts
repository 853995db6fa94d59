// The usage meter's writes have a deadline (docs/billing.md, docs/operations.md): a flush blocked
// by a lock on usage_period_units, or on a connection to a Postgres that stopped answering (a
// primary gone without a reset: a relay that stops forwarding), fails within it and is counted;
// once the block is gone, the units are written exactly once; and a stop during the block ends
// within its bound, having written everything if the block went away in time, or having logged
// what it could not write. Against the real Postgres, in this file's own database.
import net from 'node:net'
import type { AddressInfo } from 'node:net'
import { pino } from 'pino'
import t, { type Test } from 'tap'
import { loggerOptions } from '../../src/ops/logging.js'
import { openOneConnection, type Sql } from '../../src/store/db.js'
import { UsageMeter } from '../../src/usage/meter.js'
import { freshDatabase } from '../helpers/db.js'
import { createParent } from '../helpers/gateway.js'
import { holding } from '../helpers/held-transaction.js'
import { orTimeout, until } from '../helpers/poll.js'

const database = await freshDatabase(t)

/** Postgres's limit on a write in these tests; the meter waits a second more for an answer. */
const WRITE_TIMEOUT_MS = 500
const ANSWER_MARGIN_MS = 1_000
const CLOSE_TIMEOUT_MS = 4_000
/** What a loaded machine may add to a bound before the test calls it broken. */
const SLACK_MS = 8_000
/** Past this, a flush or a close is taken to hang (the defect): the test fails instead of waiting. */
const HUNG_MS = 15_000

/** Units of the `requests` meter a tenant has in usage_period_units. */
async function unitsOf(tenantId: string): Promise<number> {
  const [row] = await database.sql<{ n: string }[]>`
    select coalesce(sum(units), 0)::text as n from usage_period_units where tenant_id = ${tenantId} and meter = 'requests'`
  return Number(row!.n)
}

async function requestsOf(tenantId: string): Promise<number> {
  const [row] = await database.sql<{ n: string }[]>`
    select coalesce(sum(requests), 0)::text as n from usage_daily where tenant_id = ${tenantId}`
  return Number(row!.n)
}

async function hasMark(replicaId: string): Promise<boolean> {
  const rows = await database.sql`select 1 from usage_flush_marks where replica_id = ${replicaId}`
  return rows.length > 0
}

/** Whether a statement of this database waits on a lock that holds up a usage flush. */
async function flushWaitsOnLock(): Promise<boolean> {
  const rows = await database.sql`
    select 1 from pg_stat_activity
    where datname = current_database() and wait_event_type = 'Lock' and query like '%usage_batches%'`
  return rows.length > 0
}

/**
 * A TCP relay to the test database's server that can stop forwarding, as a server that vanished
 * without a reset: `freeze` leaves every connection open now unanswered for good (`replies`: the
 * client's bytes still reach Postgres, its answers are held: a statement that commits and whose
 * reply is lost), `blackhole` does the same to new ones until `heal`.
 */
async function vanishingRelay(t: Test, target: URL) {
  let blackhole = false
  const live = new Set<[net.Socket, net.Socket]>()
  const all = new Set<net.Socket>()
  const server = net.createServer((client) => {
    all.add(client)
    client.on('error', () => {})
    if (blackhole) {
      client.pause()
      return
    }
    const upstream = net.connect(Number(target.port || 5432), target.hostname)
    all.add(upstream)
    upstream.on('error', () => client.destroy())
    client.on('close', () => upstream.destroy())
    upstream.on('close', () => client.destroy())
    const pair: [net.Socket, net.Socket] = [client, upstream]
    live.add(pair)
    client.pipe(upstream)
    upstream.pipe(client)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    for (const socket of all) socket.destroy()
    return new Promise<void>((resolve) => server.close(() => resolve()))
  })
  const url = new URL(target)
  url.host = `127.0.0.1:${(server.address() as AddressInfo).port}`
  return {
    url: url.toString(),
    freeze(what: 'both' | 'replies' = 'both') {
      for (const pair of live) {
        const [client, upstream] = pair
        upstream.unpipe(client)
        upstream.pause()
        if (what === 'both') {
          client.unpipe(upstream)
          client.pause()
        }
        live.delete(pair)
      }
    },
    blackhole: () => (blackhole = true),
    heal: () => (blackhole = false),
  }
}

/**
 * A meter writing to `url` on a connection of its own, with short deadlines, its failures and log
 * lines kept. Its pool goes to `url` too, as the gateway's does: the meter must not hang on it either.
 */
function meterOn(t: Test, url: string) {
  const sql = openOneConnection(url, 'tgw test meter pool')
  t.teardown(() => sql.end({ timeout: 0 }).catch(() => {}))
  const lines: Record<string, unknown>[] = []
  const log = pino(loggerOptions('info'), { write: (line: string) => lines.push(JSON.parse(line)) })
  const opened: Sql[] = []
  const failures = { count: 0 }
  const meter = new UsageMeter({
    sql,
    log,
    openConnection: (parameters) => {
      const connection = openOneConnection(url, 'tgw test meter own', parameters)
      opened.push(connection)
      return connection
    },
    writeTimeoutMs: WRITE_TIMEOUT_MS,
    closeTimeoutMs: CLOSE_TIMEOUT_MS,
    onFlushFailed: () => failures.count++,
  })
  t.teardown(async () => {
    for (const connection of opened) await connection.end({ timeout: 0 }).catch(() => {})
  })
  const warnings = () => lines.filter((line) => line.level === 40 && /usage flush failed/.test(String(line.msg)))
  const errors = () => lines.filter((line) => line.level === 50)
  return { meter, failures, lines, warnings, errors, opened }
}

/** Runs `work`, and how long it took, or 'hung' past HUNG_MS. */
async function timed(work: Promise<void>): Promise<number | 'hung'> {
  const started = performance.now()
  const outcome = await orTimeout(work, HUNG_MS, 'hung' as const)
  return outcome === 'hung' ? outcome : performance.now() - started
}

t.test('a flush blocked by a lock on usage_period_units fails in time; the units go in once after', async (t) => {
  const tenant = await createParent(database.sql, { name: 'locked' })
  const { meter, failures, warnings } = meterOn(t, database.url)
  for (let i = 0; i < 5; i++) meter.record(tenant.id, 200, true)

  const release = await holding(database.url, 'lock table usage_period_units in access exclusive mode')
  let released = false
  t.teardown(() => (released ? undefined : release()))
  const took = await timed(meter.flush())
  t.not(took, 'hung', 'the flush did not wait for the lock')
  t.ok(
    took !== 'hung' && took < WRITE_TIMEOUT_MS + ANSWER_MARGIN_MS + SLACK_MS,
    `failed within its deadline (${took} ms)`,
  )
  t.equal(failures.count, 1, 'the failure is counted')
  t.ok(meter.lagMs() >= 0 && (await requestsOf(tenant.id)) === 0, 'nothing of the batch was written')
  for (let i = 0; i < 2; i++) {
    const again = await timed(meter.flush())
    t.not(again, 'hung')
  }
  t.equal(failures.count, 3, 'each try is counted')
  t.equal(warnings().length, 1, 'and the outage is logged once')

  for (let i = 0; i < 3; i++) meter.record(tenant.id, 200, true)
  await release()
  released = true
  await meter.flush()
  t.equal(failures.count, 3, 'the retry went through')
  t.equal(await unitsOf(tenant.id), 8, 'every unit, once')
  t.equal(await requestsOf(tenant.id), 8)
  t.equal(meter.lagMs(), 0, 'nothing pending')
  await meter.close()
})

t.test('a flush on a connection that stopped answering fails in time; a fresh one writes it once', async (t) => {
  const tenant = await createParent(database.sql, { name: 'vanished' })
  const relay = await vanishingRelay(t, new URL(database.url))
  const { meter, failures, warnings } = meterOn(t, relay.url)
  meter.record(tenant.id, 200, true)
  await meter.flush()
  t.equal(await unitsOf(tenant.id), 1, 'written through the relay')

  for (let i = 0; i < 4; i++) meter.record(tenant.id, 200, true)
  relay.freeze()
  relay.blackhole()
  const took = await timed(meter.flush())
  t.not(took, 'hung', 'the flush did not wait on the dead connection')
  t.ok(
    took !== 'hung' && took < WRITE_TIMEOUT_MS + ANSWER_MARGIN_MS + SLACK_MS,
    `failed within its deadline (${took} ms)`,
  )
  t.equal(failures.count, 1, 'the failure is counted')
  t.not(await timed(meter.flush()), 'hung', 'a new connection to the vanished server fails in time too')
  t.equal(failures.count, 2)
  t.equal(warnings().length, 1, 'logged once')

  relay.heal()
  meter.record(tenant.id, 200, true)
  await meter.flush()
  t.equal(failures.count, 2, 'the retry on a fresh connection went through')
  t.equal(await unitsOf(tenant.id), 6, 'every unit, once')
  t.equal(meter.lagMs(), 0)
  await meter.close()
})

t.test('a stop during a lock ends within its bound, and writes everything once the lock goes', async (t) => {
  const tenant = await createParent(database.sql, { name: 'stop-lock-lifted' })
  const { meter, errors } = meterOn(t, database.url)
  meter.record(tenant.id, 200, true)
  await meter.flush()
  for (let i = 0; i < 6; i++) meter.record(tenant.id, 200, true)

  const release = await holding(database.url, 'lock table usage_period_units in access exclusive mode')
  let released = false
  t.teardown(() => (released ? undefined : release()))
  const closing = timed(meter.close())
  t.ok(await until(HUNG_MS, flushWaitsOnLock), 'the last write waits on the lock')
  await release()
  released = true
  const took = await closing
  t.not(took, 'hung')
  t.ok(took !== 'hung' && took < CLOSE_TIMEOUT_MS + SLACK_MS, `the stop ended within its bound (${took} ms)`)
  t.equal(await unitsOf(tenant.id), 7, 'every unit, once')
  t.equal(errors().length, 0, 'nothing reported lost')
  t.notOk(await hasMark(meter.replicaId), 'the replica took its mark with it')
})

t.test('a stop on a connection whose replies stopped retries on a fresh one: written once', async (t) => {
  const tenant = await createParent(database.sql, { name: 'stop-vanished' })
  const relay = await vanishingRelay(t, new URL(database.url))
  const { meter, errors, opened } = meterOn(t, relay.url)
  meter.record(tenant.id, 200, true)
  await meter.flush()
  for (let i = 0; i < 9; i++) meter.record(tenant.id, 200, true)

  // A failover: the old connection's statement reaches Postgres and commits, its reply never
  // comes back; new connections work.
  relay.freeze('replies')
  const took = await timed(meter.close())
  t.not(took, 'hung')
  t.ok(took !== 'hung' && took < CLOSE_TIMEOUT_MS + SLACK_MS, `the stop ended within its bound (${took} ms)`)
  t.ok(opened.length >= 2, 'it tried again on a fresh connection')
  t.equal(await unitsOf(tenant.id), 10, 'every unit, once: the batch committed by the lost reply was not added again')
  t.equal(errors().length, 0, 'nothing reported lost')
  t.notOk(await hasMark(meter.replicaId), 'the replica took its mark with it')
})

t.test('a stop while the lock stays ends within its bound and says what it could not write', async (t) => {
  const tenant = await createParent(database.sql, { name: 'stop-lock-held' })
  const { meter, errors, failures } = meterOn(t, database.url)
  meter.record(tenant.id, 200, true)
  await meter.flush()
  for (let i = 0; i < 4; i++) meter.record(tenant.id, 200, true, undefined, 3)

  const release = await holding(database.url, 'lock table usage_period_units in access exclusive mode')
  let released = false
  t.teardown(() => (released ? undefined : release()))
  const took = await timed(meter.close())
  t.not(took, 'hung')
  t.ok(took !== 'hung' && took < CLOSE_TIMEOUT_MS + SLACK_MS, `the stop ended within its bound (${took} ms)`)
  t.ok(failures.count >= 2, 'it tried more than once')
  const [report] = errors()
  t.equal(errors().length, 1, 'one error line')
  t.match(report, { requests: 4, units: { requests: 12 } }, 'naming the requests and units it could not write')
  await release()
  released = true
  t.equal(await unitsOf(tenant.id), 1, 'only what was written before the stop')
  t.ok(await hasMark(meter.replicaId), 'the mark stays, for the close to record the loss once it ages out')
})
