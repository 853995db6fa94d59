// The request log's rows of records (request-log/schema.ts, rows.ts, queries.ts) on a real Postgres:
// what a row holds comes back as it went in: records of any text, each parent its own, newest
// first, whatever their ids; a log of a row a record converted whole; days kept in their
// partitions, one made again under the writer; COPYs in their seqs' order.
import pino from 'pino'
import postgres from 'postgres'
import t, { type Test } from 'tap'
import { DAY_MS, dayOf, partitionName } from '../../src/request-log/partitions.js'
import type { RequestFilter } from '../../src/request-log/filters.js'
import type { RequestRow } from '../../src/request-log/queries.js'
import { requestById } from '../../src/request-log/record-by-id.js'
import type { RequestRecord } from '../../src/request-log/capture.js'
import { convertOldLog } from '../../src/request-log/conversion.js'
import { ensureRequestLogTable } from '../../src/request-log/schema.js'
import { WRITE_LOCK } from '../../src/request-log/row-copy.js'
import { RequestLogWriter, type WriterOptions } from '../../src/request-log/writer.js'
import { openOneConnection } from '../../src/store/db.js'
import { freshDatabase } from '../helpers/db.js'
import { until } from '../helpers/poll.js'
import { ACCOUNTS, logRecord as record, madeId, uuid } from '../helpers/request-records.js'
import { allPages, FORMS, list, MADE_COUNTS, NO_FILTER, OTHER_STEM_ID, writerOn } from '../helpers/request-log-rows.js'

for (const { copy, form } of FORMS)
  t.test(`records of any text come back as they went in, each parent its own, newest first (${form})`, async (t) => {
    const { sql, writer } = await writerOn(t, 3, copy)
    const now = Date.now()
    const awkward = ['/p/"quoted"', '/p/back\\slash', '/p/a b', '/p/{brace},comma', '/p/é€😀', '/p/NULL', '/p/null']
    const records: RequestRecord[] = awkward.map((path, i) => ({
      id: i === 0 ? 'NULL' : i === 1 ? 'a"b' : i === 4 ? OTHER_STEM_ID : madeId(MADE_COUNTS[i]!),
      idGiven: i < 2,
      timeMs: now - DAY_MS + i * 1000.25,
      accountId: ACCOUNTS[i % 2]!,
      tenantId: uuid(2, i),
      keyId: uuid(3, i),
      method: i % 2 === 0 ? 'GET' : 'POST',
      route: i % 3 === 0 ? 'management' : '/api',
      path,
      status: [200, 404, 429, 503][i % 4]!,
      code: i % 4 === 2 ? 'rate_limited' : null,
      durationMs: 1.5 + i,
      requestBytes: i * 10,
      responseBytes: 2 ** 40 + i,
      sourceIp: i % 2 === 0 ? '127.0.0.1' : '::1',
      // Units (a management record's cost is 0), reported by some records only; none in account 2's.
      cost: i % 3 === 0 ? 0 : 1 + i,
      // A refusal of the gateway's (a 429) was not forwarded: its cost comes back all the same.
      forwarded: i % 4 !== 2,
      units: i === 1 ? null : i % 2 === 0 ? `{"tokens":${10 ** i},"images":${i}}` : null,
      // What shadow limits would have refused, on some records (none in account 2's).
      wouldRefuse:
        i === 2 ? 'sub_account.shadow.rate' : i === 4 ? 'sub_account.shadow.rate,account.shadow.monthly_quota' : null,
      // How each ended: some of account 2's cut short, all of account 1's whole (its rows keep no outcomes).
      outcome: i === 3 ? 'client_aborted' : i === 5 ? 'upstream_aborted' : 'completed',
    }))
    for (const record of records) writer.add(record)
    await writer.flush()
    for (const account of ACCOUNTS) {
      const expected = records.filter((r) => r.accountId === account).reverse()
      const listed = await list(sql, account, NO_FILTER)
      t.same(
        listed.map((row) => ({
          id: row.id,
          timeMs: row.time.getTime(),
          accountId: row.account_id,
          tenantId: row.tenant_id,
          keyId: row.key_id,
          method: row.method,
          route: row.route,
          path: row.path,
          status: row.status,
          code: row.code,
          durationMs: row.duration_ms,
          requestBytes: Number(row.request_bytes),
          responseBytes: Number(row.response_bytes),
          sourceIp: row.source_ip,
          cost: row.cost,
          forwarded: row.forwarded,
          units: row.units,
          wouldRefuse: row.would_refuse,
          outcome: row.outcome,
        })),
        // A management record (cost 0) reads as not forwarded: nothing of it was.
        expected.map(({ idGiven: _, ...r }) => ({
          ...r,
          forwarded: r.forwarded && r.cost > 0,
          timeMs: Math.floor(r.timeMs),
        })),
        `account ${account}: every field, in order`,
      )
    }
    const [byView] = await sql<{ n: string }[]>`select count(*)::text as n from request_log where path like '/p/%'`
    t.equal(byView!.n, String(records.length), 'the view reads a record a row')
  })

for (const { copy, form } of FORMS)
  t.test(`a NUL or a lone surrogate is kept as U+FFFD, and its batch is written (${form})`, async (t) => {
    const { sql, writer } = await writerOn(t, 500, copy)
    writer.add(record({ id: madeId(1), path: '/p/nul\u0000end' }))
    writer.add(record({ id: madeId(2), path: '/p/\ud800lone' }))
    writer.add(record({ id: madeId(3), path: '/p/pair😀', sourceIp: 'a\t"{b}\\' }))
    await writer.flush()
    const listed = await list(sql, ACCOUNTS[0]!, NO_FILTER)
    t.same(
      listed.map((row) => [row.path, row.source_ip]),
      [
        ['/p/pair😀', 'a\t"{b}\\'],
        ['/p/\ufffdlone', '127.0.0.1'],
        ['/p/nul\ufffdend', '127.0.0.1'],
      ],
    )
  })

// A row writes a text that repeats the record before's as that one's bytes again (copy-format.ts):
// runs of one value, broken by another, by SQL NULL and by text of every width, come back whole,
// and each record is found by the filters of its values.
for (const { copy, form } of FORMS)
  t.test(`values repeated from the record before come back as they went in (${form})`, async (t) => {
    const { sql, writer } = await writerOn(t, 500, copy)
    const now = Date.now()
    const paths = ['/p/é€😀', '/p/é€😀', '/p/nul\u0000', '/p/nul\u0000', '/p/x', '/p/é€😀', '/p/é€😀', '/p/x']
    const codes = [null, 'rate_limited', 'rate_limited', null, null, 'rate_limited', 'scope_missing', 'scope_missing']
    const records: RequestRecord[] = paths.map((path, i) => ({
      id: madeId(100 + i),
      idGiven: false,
      timeMs: now + i,
      accountId: ACCOUNTS[0]!,
      tenantId: uuid(2, [1, 1, 2, 1, 1, 2, 2, 1][i]!),
      keyId: uuid(3, [1, 2, 2, 1, 1, 1, 2, 2][i]!),
      method: i < 4 ? 'GET' : 'DELETE',
      route: ['/api', '/api', 'management', '/api', '/api', '/api', 'management', 'management'][i]!,
      path,
      status: codes[i] === null ? [200, 0, 0, 201, 201][i]! : codes[i] === 'rate_limited' ? 429 : 403,
      code: codes[i]!,
      durationMs: 1,
      requestBytes: 0,
      responseBytes: 7,
      sourceIp: i === 7 ? '::1' : '127.0.0.1',
      cost: 1,
      forwarded: codes[i] === null,
      units: null,
    }))
    for (const record of records) writer.add(record)
    await writer.flush()
    const fields = (rows: RequestRow[]) => rows.map((row) => [row.id, row.path, row.code, row.method, row.source_ip])
    const expected = (kept: RequestRecord[]) =>
      kept.reverse().map((r) => [r.id, r.path.replace('\u0000', '\ufffd'), r.code, r.method, r.sourceIp])
    const listed = await list(sql, ACCOUNTS[0]!, NO_FILTER)
    t.same(fields(listed), expected([...records]), 'every record, in order')
    const filters: [string, Partial<RequestFilter>, (r: RequestRecord) => boolean][] = [
      ['tenant 2', { tenantId: uuid(2, 2) }, (r) => r.tenantId === uuid(2, 2)],
      ['key 1', { keyId: uuid(3, 1) }, (r) => r.keyId === uuid(3, 1)],
      ['route management', { route: 'management' }, (r) => r.route === 'management'],
      ['status 201', { status: { exact: 201 } }, (r) => r.status === 201],
      ['code scope_missing', { code: 'scope_missing' }, (r) => r.code === 'scope_missing'],
    ]
    for (const [name, filter, keeps] of filters) {
      const kept = records.filter(keeps)
      t.ok(kept.length > 0 && kept.length < records.length, `${name}: some records, not all`)
      t.same(
        fields(await list(sql, ACCOUNTS[0]!, { ...NO_FILTER, ...filter })),
        expected(kept),
        `${name}: found by its summary`,
      )
    }
  })

t.test('a log of a row a record, from before the arrays, is converted whole once serving', async (t) => {
  const database = await freshDatabase(t, { migrated: false })
  const sql = database.sql
  const day = Math.floor(Date.now() / DAY_MS)
  const from = (d: number) => new Date(d * DAY_MS).toISOString()
  await sql.unsafe(`
    create table request_log (seq bigint generated always as identity, id text not null, time timestamptz not null,
      account_id uuid not null, tenant_id uuid not null, key_id uuid not null, method text not null, route text not null,
      path text not null, status smallint not null, code text, duration_ms real not null, request_bytes bigint not null,
      response_bytes bigint not null, source_ip text not null) partition by range (time);
    create table request_log_old_a partition of request_log for values from ('${from(day - 1)}') to ('${from(day)}');
    create table request_log_old_b partition of request_log for values from ('${from(day)}') to ('${from(day + 1)}');
    insert into request_log (id, time, account_id, tenant_id, key_id, method, route, path, status, code, duration_ms,
      request_bytes, response_bytes, source_ip)
    select 'old-' || i, to_timestamp(${day * 86_400} - 3600 + i * 3), '${ACCOUNTS[0]}'::uuid, '${uuid(2, 1)}',
      '${uuid(3, 1)}', 'GET', '/api', '/old/' || i, case when i % 10 = 0 then 429 else 200 end,
      case when i % 10 = 0 then 'rate_limited' end, 1.5, i, 2, '127.0.0.1'
    from generate_series(1, 1300) i`)
  // The start makes the rows' table only; a record written before the conversion is newer.
  await ensureRequestLogTable(sql)
  const writer = new RequestLogWriter({ sql, log: pino({ level: 'silent' }) })
  t.teardown(() => writer.close())
  writer.add(record({ id: madeId(1), path: '/new' }))
  await writer.flush()
  await convertOldLog(sql, pino({ level: 'silent' }))
  const { seen: listed } = await allPages(sql, ACCOUNTS[0]!, NO_FILTER, 500)
  t.equal(listed.length, 1301, 'every record')
  t.same(
    listed.map((row) => row.path),
    ['/new', ...Array.from({ length: 1300 }, (_, i) => `/old/${1300 - i}`)],
    'newest first, as before, the new record first',
  )
  t.equal((await requestById(sql, ACCOUNTS[0]!, 'old-1234'))?.path, '/old/1234', 'found by id')
  const { seen: refused } = await allPages(sql, ACCOUNTS[0]!, { ...NO_FILTER, code: 'rate_limited' }, 50)
  t.equal(refused.length, 130, 'found by code')
  const [kind] = await sql<{ kind: string }[]>`select relkind::text as kind from pg_class where relname = 'request_log'`
  t.equal(kind?.kind, 'v', 'the old table gave its name to the view')
  const [old] = await sql<
    { n: string }[]
  >`select count(*)::text as n from pg_class where relname like 'request_log_old_%'`
  t.equal(old?.n, '0', 'the old partitions are gone')
  await ensureRequestLogTable(sql)
  await convertOldLog(sql, pino({ level: 'silent' }))
  t.equal((await allPages(sql, ACCOUNTS[0]!, NO_FILTER, 500)).seen.length, 1301, 'a second start changes nothing')
})

t.test('a time range across days: each day kept in its partition, each record by its own time', async (t) => {
  const { sql, writer } = await writerOn(t, 500)
  const [account] = ACCOUNTS as [string]
  const midnight = Math.floor(Date.now() / DAY_MS) * DAY_MS
  // -0.0003 ms is kept as midnight to the microsecond: its row is in today's partition.
  const times = [-DAY_MS - 500, -DAY_MS / 2, -1_000, -0.4, -0.0003, 0, 0.6, 1_000, 5_000]
  for (const [i, offset] of times.entries())
    writer.add(record({ id: madeId(9000 + i), timeMs: midnight + offset, path: `/t/${i}` }))
  await writer.flush()
  const bounds: [number | null, number | null][] = [
    [0, null],
    [-DAY_MS / 2, null],
    [-DAY_MS / 2, 0],
    [-1, 1],
    [null, -DAY_MS / 2 + 1],
    [-DAY_MS, DAY_MS],
  ]
  for (const [since, until] of bounds) {
    const expected = times
      .map((offset, i) => ({ offset, path: `/t/${i}` }))
      .map(({ offset, path }) => ({ offset: Math.round(offset * 1000) / 1000, path }))
      .filter(({ offset }) => (since === null || offset >= since) && (until === null || offset < until))
      .map(({ path }) => path)
      .reverse()
    const { seen: got } = await allPages(
      sql,
      account,
      {
        ...NO_FILTER,
        since: since === null ? null : new Date(midnight + since),
        until: until === null ? null : new Date(midnight + until),
      },
      2,
    )
    t.same(
      got.map((row) => row.path),
      expected,
      `since ${since} until ${until} (ms from midnight)`,
    )
  }
})

// Another replica's retention sweep drops a day this writer still holds records of (a request that
// began on it and ended days later; or, as here, a partition gone under it): its batch is put back,
// and the day's partition is made again before the retry, rather than every retry failing alike
// while the rest of the log waits behind that batch.
t.test("a day's partition dropped under the writer is made again, and its records written", async (t) => {
  const { sql, writer } = await writerOn(t, 10)
  const day = dayOf(Date.now())
  writer.add(record({ id: madeId(1), path: '/p/before' }))
  await writer.flush()
  await sql.unsafe(`alter table request_log_rows detach partition ${partitionName(day)}`)
  await sql.unsafe(`drop table ${partitionName(day)}`)
  writer.add(record({ id: madeId(2), path: '/p/after' }))
  const paths = async () => (await sql<{ path: string }[]>`select path from request_log`).map((row) => row.path)
  t.ok(
    await until(10_000, async () => {
      await writer.flush()
      return (await paths()).includes('/p/after')
    }),
    'written once its partition is made again',
  )
  t.same(await paths(), ['/p/after'], 'the dropped day lost what it held, nothing more')
})

// Replicas write one at a time (row-copy.ts, WRITE_LOCK): a row takes its seq as its COPY runs and
// shows once committed, so two at once could show a row after a newer one, behind a reader walking
// newest first. Here the lock is held as another replica's COPY would hold it.
// pg_locks is the server's: only this test's database counts (other files' writers wait on theirs).
t.test("a writer's COPY waits for another's to commit, so rows show in their seqs' order", async (t) => {
  const { sql, url, writer } = await writerOn(t, 10)
  const other = postgres(url, { max: 1, onnotice: () => {}, fetch_types: false })
  t.teardown(() => other.end({ timeout: 1 }))
  await other`select pg_advisory_lock(${WRITE_LOCK})`
  writer.add(record({ id: madeId(1), path: '/p/waited' }))
  const flushed = writer.flush()
  const waiting = async () =>
    (
      await sql<{ n: number }[]>`
      select count(*)::int as n from pg_locks where locktype = 'advisory' and not granted
        and database = (select oid from pg_database where datname = current_database())
        and objid = ${WRITE_LOCK % 2 ** 32} and classid = ${Math.floor(WRITE_LOCK / 2 ** 32)}`
    )[0]!.n === 1
  t.ok(await until(5_000, waiting), "the writer's COPY waits for the lock")
  t.same(await sql`select path from request_log`, [], 'nothing written meanwhile')
  await other`select pg_advisory_unlock(${WRITE_LOCK})`
  await flushed
  t.same(
    (await sql<{ path: string }[]>`select path from request_log`).map((row) => row.path),
    ['/p/waited'],
    'written once the other is done',
  )
})

for (const { copy, form } of FORMS)
  t.test(`a log made before units gains their columns at start; its rows read none (${form})`, async (t) => {
    const { sql, writer } = await writerOn(t, 500, copy)
    writer.add(record({ id: madeId(1), path: '/p/before', cost: 4, units: '{"tokens":9}' }))
    await writer.flush()
    // A log of the version before: no unit columns (their records' units were never kept).
    await sql`alter table request_log_rows drop column costs, drop column units`
    await ensureRequestLogTable(sql)
    writer.add(record({ id: madeId(2), path: '/p/after', cost: 4, units: '{"tokens":9}' }))
    await writer.flush()
    const listed = await list(sql, ACCOUNTS[0]!, NO_FILTER)
    t.same(
      listed.map((row) => [row.path, row.cost, row.units]),
      [
        ['/p/after', 4, '{"tokens":9}'],
        ['/p/before', null, null],
      ],
    )
  })

for (const { copy, form } of FORMS)
  t.test(`a log made before outcomes gains their column at start; its records read completed (${form})`, async (t) => {
    const { sql, writer } = await writerOn(t, 500, copy)
    writer.add(record({ id: madeId(1), path: '/p/before' }))
    await writer.flush()
    // A log of the version before: no outcomes column.
    await sql`alter table request_log_rows drop column outcomes`
    await ensureRequestLogTable(sql)
    writer.add(record({ id: madeId(2), path: '/p/after', outcome: 'upstream_aborted' }))
    await writer.flush()
    const listed = await list(sql, ACCOUNTS[0]!, NO_FILTER)
    t.same(
      listed.map((row) => [row.path, row.outcome]),
      [
        ['/p/after', 'upstream_aborted'],
        ['/p/before', 'completed'],
      ],
    )
  })

for (const { copy, form } of FORMS)
  t.test(`a log made before trace ids gains their column at start; each record keeps its own (${form})`, async (t) => {
    const { sql, writer } = await writerOn(t, 500, copy)
    writer.add(record({ id: madeId(1), path: '/p/before' }))
    await writer.flush()
    // A log of the version before: no trace_ids column.
    await sql`alter table request_log_rows drop column trace_ids`
    await ensureRequestLogTable(sql)
    const traced = '4bf92f3577b34da6a3ce929d0e0e4736'
    writer.add(record({ id: madeId(2), path: '/p/traced', traceId: traced }))
    writer.add(record({ id: madeId(3), path: '/p/untraced' }))
    await writer.flush()
    const listed = await list(sql, ACCOUNTS[0]!, NO_FILTER)
    t.same(
      listed.map((row) => [row.path, row.trace_id]),
      [
        ['/p/untraced', null],
        ['/p/traced', traced],
        ['/p/before', null],
      ],
    )
  })

/** A writer on a fresh database (COPY) that notes the records of each write it ends. */
async function countingWriter(t: Test, options: Partial<WriterOptions> = {}) {
  const database = await freshDatabase(t, { migrated: false })
  const written: number[] = []
  const writer = new RequestLogWriter({
    sql: database.sql,
    log: pino({ level: 'silent' }),
    openCopyConnection: () => openOneConnection(database.url, 'request-log writes test'),
    onWritten: (records) => written.push(records),
    ...options,
  })
  t.teardown(() => writer.close())
  let made = 0
  /** Adds `n` records under `path`. */
  const add = (n: number, path: string) => {
    for (let i = 0; i < n; i++) writer.add(record({ id: madeId(++made), path: `${path}/${i}` }))
  }
  return { writer, written, add }
}

t.test('a write takes the records buffered when it began; those that come during it wait for the next', async (t) => {
  const { writer, written, add } = await countingWriter(t)
  add(3, '/first')
  const first = writer.flush()
  add(2, '/during') // the write has taken its rows, and waits for Postgres
  await first
  t.same(written, [3], 'the write took the 3 records buffered when it began, and ended')
  t.equal(writer.pending, 2, 'the 2 that came during it are still buffered')

  // A flush asked for during a write covers what was buffered when it was asked.
  add(4, '/second')
  const second = writer.flush()
  add(1, '/asked-during')
  const asked = writer.flush()
  await asked
  t.same(written, [3, 6, 1], 'the write under way, then one for the record that came during it')
  t.equal(writer.pending, 0, 'nothing left')
  await second
})

t.test("a started writer writes a batch's worth at once, without waiting for its tick", async (t) => {
  // No tick within the test.
  const { writer, written, add } = await countingWriter(t, { batchRecords: 5, flushIntervalMs: 600_000 })
  writer.start()
  add(4, '/batch')
  t.equal(writer.pending, 4, 'under a batch: buffered')
  add(1, '/fifth')
  t.equal(writer.pending, 0, 'a batch: taken for a write at once')
  await writer.flush() // after the write under way
  t.same(written, [5], 'in one write')
})
