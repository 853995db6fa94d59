// The request log's binary COPY (request-log/row-copy.ts) runs on a connection of the writer's
// own, so that what goes wrong with it stays there: management requests never share it; a COPY
// whose backend is ended or cancelled, that waits on a lock, that the server refuses, or whose
// connection is lost or partitioned fails its batch at once or at its time, and the batch is
// written again on a new connection; nothing crashes, nothing is lost, no backend is left behind.
import pino from 'pino'
import postgres from 'postgres'
import t from 'tap'
import { RequestLogWriter } from '../../src/request-log/writer.js'
import { openOneConnection } from '../../src/store/db.js'
import { freshDatabase, type TestDatabase } from '../helpers/db.js'
import { startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { orTimeout, until } from '../helpers/poll.js'
import { logRecord, madeId } from '../helpers/request-records.js'
import type { TestLike } from '../helpers/test-like.js'
import { startUpstream } from '../helpers/upstream.js'
import { postgresAddress, startRelay, viaPort } from './relay.js'

const COPY_CONNECTION = 'request-log-copy test'

/**
 * A writer of small batches on a fresh database, its COPY on a connection named COPY_CONNECTION
 * (through `port` when given: a relay). Its time is far off unless a test is about it: a failure
 * must be heard without it.
 */
async function writerOn(t: TestLike, options: { copyTimeoutMs?: number; port?: number } = {}) {
  const database = await freshDatabase(t, { migrated: false })
  const url = options.port === undefined ? database.url : viaPort(database.url, options.port)
  let failures = 0
  let written = 0
  const writer = new RequestLogWriter({
    sql: database.sql,
    log: pino({ level: 'silent' }),
    batchRecords: 500,
    flushIntervalMs: 10,
    openCopyConnection: (parameters) => openOneConnection(url, COPY_CONNECTION, parameters),
    copyTimeoutMs: options.copyTimeoutMs ?? 600_000,
    onWriteFailed: () => failures++,
    onWritten: (records) => {
      written += records
    },
  })
  t.teardown(() => writer.close())
  writer.add(logRecord({ id: madeId(0), path: '/api/0' }))
  if (!(await flushAll(writer, 5_000))) throw new Error('the table was not made, or a first batch not written')
  return { database, writer, failures: () => failures, written: () => written }
}

/** Flushes until the buffer is empty (a failed write waits out its pause first). */
async function flushAll(writer: RequestLogWriter, timeoutMs: number): Promise<boolean> {
  return until(timeoutMs, async () => {
    await writer.flush()
    return writer.buffer.size === 0
  })
}

async function loggedIds(database: TestDatabase): Promise<string[]> {
  return (await database.sql<{ id: string }[]>`select id from request_log`).map((row) => row.id)
}

/** The made ids 0 to n - 1, sorted as loggedIds' are compared. */
const madeIds = (n: number) => Array.from({ length: n }, (_, i) => madeId(i)).sort()

/** Backends of the COPY's connection, the way Postgres sees them. */
async function copyBackends(sql: postgres.Sql, where: 'waiting' | 'any') {
  return sql<{ pid: number }[]>`select pid from pg_stat_activity where application_name = ${COPY_CONNECTION}
    and (${where} = 'any' or wait_event_type = 'Lock')`
}

t.test('management requests never fail for the COPYs the log runs beside them', async (t) => {
  const upstream = await startUpstream(t)
  const gw = await startGateway(t, {
    // A small pool: had the COPY a pooled connection, queries would be pipelined onto it.
    pool: { maxConnections: 2 },
    requestLog: { flushIntervalMs: 5 },
    gatewayConfig: { routes: [{ prefix: '/api', upstream: upstream.url }] },
  })
  const parent = await gw.createParent()
  const statuses = new Map<string, number>()
  const count = (what: string, status: number) => {
    const key = `${what} ${status}`
    statuses.set(key, (statuses.get(key) ?? 0) + 1)
  }
  const endAt = Date.now() + 2_000
  const proxied = async () => {
    while (Date.now() < endAt)
      count('proxied', (await callAs(gw.url, parent.apiKey, { path: '/api/x', acting: 'self' })).status)
  }
  const managed = async (n: number) => {
    for (let i = 0; Date.now() < endAt; i++) {
      const created = await callAs(gw.url, parent.apiKey, {
        method: 'POST',
        path: '/v1/sub-accounts',
        acting: 'self',
        json: { name: `copy ${n}-${i}` },
      })
      count('created', created.status)
      count('listed', (await callAs(gw.url, parent.apiKey, { path: '/v1/sub-accounts?limit=5' })).status)
    }
  }
  await Promise.all([...Array.from({ length: 6 }, proxied), ...Array.from({ length: 4 }, (_, n) => managed(n))])
  const answered = [...statuses.values()].reduce((sum, n) => sum + n, 0)
  t.same(
    [...statuses.keys()].sort(),
    ['created 201', 'listed 200', 'proxied 200'],
    `every answer as usual (${JSON.stringify(Object.fromEntries(statuses))})`,
  )
  t.ok(
    await until(10_000, async () => {
      const [row] = await gw.sql<{ n: number }[]>`select count(*)::int as n from request_log`
      return row!.n >= answered
    }),
    `all ${answered} answers recorded`,
  )
})

t.test(
  'batch after batch on one connection, each smaller or larger: none fails, each record counted once',
  async (t) => {
    // The COPY's memory is the last batch's (row-copy.ts): a batch shorter than the one before must
    // send its own bytes only.
    const { database, writer, failures, written } = await writerOn(t)
    let next = 1
    for (const records of [1_200, 30, 700, 5]) {
      for (let i = 0; i < records; i++, next++) writer.add(logRecord({ id: madeId(next), path: `/api/${next}` }))
      t.ok(await flushAll(writer, 5_000), `${records} written`)
    }
    t.equal(failures(), 0, 'no write failed')
    t.equal(written(), next, 'the records written, counted as records')
    t.same((await loggedIds(database)).sort(), madeIds(next), 'each record once')
  },
)

t.test('a COPY whose backend is ended or cancelled is written again on a new connection', async (t) => {
  const { database, writer, failures } = await writerOn(t)
  const admin = postgres(database.url, { max: 1, onnotice: () => {} })
  t.teardown(() => admin.end({ timeout: 1 }))
  // Each row waits, once its data has come, for a lock the test holds: the COPY is under way.
  await admin`select pg_advisory_lock(7)`
  await database.sql.unsafe(`
    create function row_waits() returns trigger language plpgsql as $$
      begin perform pg_advisory_xact_lock_shared(7); return new; end $$;
    create trigger row_waits before insert on request_log_rows for each row execute function row_waits()`)
  writer.start()
  let added = 1
  const rounds = [
    { end: 'pg_terminate_backend', records: 100, pathBytes: 10 },
    { end: 'pg_cancel_backend', records: 100, pathBytes: 10 },
    // Some 4 MB: the COPY waits on its first row while its data is still on the way.
    { end: 'pg_terminate_backend', records: 500, pathBytes: 8_000 },
  ]
  for (const [round, { end, records, pathBytes }] of rounds.entries()) {
    for (let i = 0; i < records; i++, added++)
      writer.add(logRecord({ id: madeId(added), path: `/api/${added}/`.padEnd(pathBytes, 'x') }))
    t.ok(
      await until(5_000, async () => {
        const [row] = await admin<{ ended: boolean }[]>`select ${admin.unsafe(end)}(pid) as ended
          from pg_stat_activity where application_name = ${COPY_CONNECTION} and query like 'copy%'
          and wait_event = 'advisory'`
        return row?.ended === true
      }),
      `round ${round + 1}: ${end} while the COPY waits`,
    )
    t.ok(await until(5_000, async () => failures() === round + 1), `round ${round + 1}: a failed write`)
  }
  await admin`select pg_advisory_unlock(7)`
  t.ok(await flushAll(writer, 10_000), 'the buffer empties once the COPYs are left alone')
  t.equal(writer.buffer.dropped, 0)
  t.same(await loggedIds(database).then((ids) => ids.sort()), madeIds(added), `all ${added} records written, once each`)
})

t.test('a COPY that waits on a lock past its time is ended by Postgres; its batch is written later', async (t) => {
  const { database, writer, failures } = await writerOn(t, { copyTimeoutMs: 300 })
  const holder = postgres(database.url, { max: 1, onnotice: () => {} })
  t.teardown(() => holder.end({ timeout: 1 }))
  let release!: () => void
  const released = new Promise<void>((resolve) => (release = resolve))
  const holding = holder.begin(async (tx) => {
    await tx`lock table request_log_rows in access exclusive mode`
    await released
  })
  await until(5_000, async () => {
    const [row] = await database.sql<{ n: number }[]>`select count(*)::int as n from pg_locks
      where relation = 'request_log_rows'::regclass and mode = 'AccessExclusiveLock' and granted
        and database = (select oid from pg_database where datname = current_database())`
    return row!.n === 1
  })
  writer.add(logRecord({ id: madeId(1), path: '/api/1' }))
  t.equal(await orTimeout(writer.flush(), 5_000, 'no answer'), undefined, 'the write gave up')
  t.equal(failures(), 1, 'counted as a failed write')
  t.equal(writer.buffer.size, 1, 'its record put back')
  t.ok(
    await until(2_000, async () => (await copyBackends(database.sql, 'waiting')).length === 0),
    'no backend of it left waiting on the lock',
  )
  release()
  await holding
  t.ok(await flushAll(writer, 10_000), 'written once the lock is gone')
  t.same((await loggedIds(database)).sort(), madeIds(2))
})

t.test('a COPY the server refuses after its data fails its batch, which is written once it can be', async (t) => {
  const { database, writer, failures } = await writerOn(t)
  await database.sql`alter table request_log_rows add constraint refuse_second check (id_low <> 1)`
  writer.add(logRecord({ id: madeId(1), path: '/api/1' }))
  t.equal(await orTimeout(writer.flush(), 5_000, 'no answer'), undefined, 'the write hears of the refusal')
  t.equal(failures(), 1, 'the refused COPY is a failed write')
  t.equal(writer.buffer.size, 1, 'its record put back')
  await database.sql`alter table request_log_rows drop constraint refuse_second`
  t.ok(await flushAll(writer, 10_000), 'written once the server takes it')
  t.same((await loggedIds(database)).sort(), madeIds(2))
})

t.test('a COPY whose connection is lost or cut off fails, and is written on a new connection', async (t) => {
  const relay = await startRelay(t, postgresAddress())
  const { database, writer, failures } = await writerOn(t, { copyTimeoutMs: 300, port: relay.port })
  let written = 1
  for (const how of ['rst', 'fin'] as const) {
    // The connection goes as the COPY's data is sent: Postgres never sees the rows.
    const lost = relay.closeOn('PGCOPY', how)
    writer.add(logRecord({ id: madeId(written), path: `/api/${written}` }))
    written++
    t.equal(await orTimeout(writer.flush(), 5_000, 'no answer'), undefined, `${how}: the write hears of it`)
    await lost
    t.equal(failures(), how === 'rst' ? 1 : 2, `${how}: a failed write`)
    t.ok(await flushAll(writer, 10_000), `${how}: written on a new connection`)
  }
  // A partition: the server hears nothing, so only the writer's own time (twice the server's) ends the COPY.
  relay.blackhole()
  writer.add(logRecord({ id: madeId(written), path: `/api/${written}` }))
  written++
  t.equal(await orTimeout(writer.flush(), 5_000, 'no answer'), undefined, 'partitioned: the write gave up')
  t.equal(failures(), 3, 'partitioned: a failed write')
  await relay.restore()
  t.ok(await flushAll(writer, 10_000), 'written once the network is back')
  t.same((await loggedIds(database)).sort(), madeIds(written))
})
