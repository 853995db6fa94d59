// A day's partition made or dropped while the log is read (docs/operations.md, the request log):
// the reads under way and the ones that come after go on. A `partition of` or a drop of an
// attached partition locks the whole table, waits for every read under way, and queues every
// later read behind it: a stall of the API's reads (and the writer's COPY) at every midnight and
// every retention sweep, up to the longest read.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import postgres from 'postgres'
import {
  DAY_MS,
  dayOf,
  dropExpiredPartitions,
  ensurePartition,
  partitionDays,
  partitionName,
} from '../../src/request-log/partitions.js'
import { ensureRequestLogTable } from '../../src/request-log/schema.js'
import { openStore } from '../../src/store/db.js'
import { freshDatabase } from '../helpers/db.js'
import { holding } from '../helpers/held-transaction.js'
import { until } from '../helpers/poll.js'

/** A read of the log under way: it holds its lock (and snapshot) until released. */
const readUnderWay = (url: string) => holding(url, 'select count(*) from request_log_rows')

/** Whether `work` ends while the read under way still holds the table (given 10 s). */
async function endsWhileHeld(work: Promise<unknown>) {
  let timer: NodeJS.Timeout | undefined
  const waited = new Promise((resolve) => (timer = setTimeout(resolve, 10_000, 'waited')))
  const first = await Promise.race([work.then(() => 'ended'), waited])
  clearTimeout(timer)
  return first === 'ended'
}

t.test('a partition is made and dropped while the log is read, and no read waits for it', async (t) => {
  const database = await freshDatabase(t, { migrated: false })
  const { sql, url } = database
  const reader = postgres(url, { max: 1, onnotice: () => {}, fetch_types: false })
  t.teardown(() => reader.end({ timeout: 1 }))
  await ensureRequestLogTable(sql)
  const today = dayOf(Date.now())
  await ensurePartition(sql, today - 3)
  await ensurePartition(sql, today)

  // Made: the next day's partition, while a read holds the table.
  let release = await readUnderWay(url)
  const made = ensurePartition(sql, today + 1)
  await new Promise((resolve) => setTimeout(resolve, 200))
  const read = reader`select count(*) from request_log_rows`
  t.ok(await endsWhileHeld(read), 'a read that starts after the partition is asked for is answered')
  t.ok(await endsWhileHeld(made), 'the partition is made without waiting for the read under way')
  await release()
  t.same(await partitionDays(sql), [today - 3, today, today + 1])
  const [row] = await sql<{ compression: string | null }[]>`
    select attcompression::text as compression from pg_attribute
    where attrelid = ${partitionName(today + 1)}::regclass
      and attname = 'paths'`
  const [parent] = await sql<{ compression: string | null }[]>`
    select attcompression::text as compression from pg_attribute where attrelid = 'request_log_rows'::regclass and attname = 'paths'`
  t.equal(row!.compression, parent!.compression, "the partition keeps the table's compression")
  const indexes = await sql<{ n: number }[]>`
    select count(*)::int as n from pg_inherits join pg_class on pg_class.oid = inhrelid
    where inhparent in (select indexrelid from pg_index where indrelid = 'request_log_rows'::regclass)
    group by inhparent`
  t.ok(indexes.length > 0 && indexes.every(({ n }) => n === 3), "every index of the table has each partition's")
  const tomorrow = new Date((today + 1) * DAY_MS + 1000)
  await sql`
    insert into request_log_rows (account_id, first_time, last_time, records, tenant_set, key_set, route_set,
      status_set, code_set, not_2xx, refused_tenant_set, refused_key_set, ids, times_us, tenant_ids, key_ids,
      methods, routes, paths, statuses, codes, durations_us, request_bytes, response_bytes, source_ips)
    values (gen_random_uuid(), ${tomorrow}, ${tomorrow}, 0,
      '{}', '{}', '{}', '{}', '{}', false, '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}',
      '{}', '{}', '{}')`
  t.equal((await sql<{ n: number }[]>`select count(*)::int as n from request_log_rows`)[0]!.n, 1, 'rows go into it')

  // Dropped: the oldest day, past a retention of two days, while a read holds the table.
  release = await readUnderWay(url)
  const dropped = dropExpiredPartitions(sql, 2, Date.now())
  await new Promise((resolve) => setTimeout(resolve, 200))
  const readDuringDrop = reader`select count(*) from request_log_rows`
  t.ok(await endsWhileHeld(readDuringDrop), 'a read that starts after the drop is asked for is answered')
  await release()
  t.same(await dropped, [today - 3], 'the expired day goes once the read under way ends')
  t.same(await partitionDays(sql), [today, today + 1])
  t.same(
    await sql`select relname from pg_class where relname like 'request_log_rows_2%' and relkind = 'r' order by 1`,
    (await partitionDays(sql)).map((day) => ({ relname: partitionName(day) })),
    'nothing of the dropped day is left',
  )
})

t.test('a drop cut short is finished by the next sweep', async (t) => {
  const database = await freshDatabase(t, { migrated: false })
  const { sql, url } = database
  await ensureRequestLogTable(sql)
  const today = dayOf(Date.now())
  for (const day of [today - 5, today - 4, today]) await ensurePartition(sql, day)
  const name = partitionName

  // A detach stopped while it waited for a read (the gateway stopped, say): the partition is
  // left half detached. And a day detached whose drop did not come.
  const release = await readUnderWay(url)
  const detacher = postgres(url, { max: 1, onnotice: () => {}, fetch_types: false })
  t.teardown(() => detacher.end({ timeout: 1 }))
  const [{ pid }] = (await detacher`select pg_backend_pid() as pid`) as unknown as [{ pid: number }]
  const detaching = detacher.unsafe(`alter table request_log_rows detach partition ${name(today - 5)} concurrently`)
  const stopped = detaching.then(
    () => 'finished',
    () => 'stopped',
  )
  await until(5_000, async () => {
    const [row] = await sql<{ waiting: boolean }[]>`
      select wait_event_type = 'Lock' as waiting from pg_stat_activity where pid = ${pid}`
    return row?.waiting === true
  })
  await sql`select pg_cancel_backend(${pid})`
  t.equal(await stopped, 'stopped')
  await release()
  const [pending] = await sql<{ pending: boolean }[]>`
    select inhdetachpending as pending from pg_inherits where inhrelid = ${name(today - 5)}::regclass`
  t.equal(pending?.pending, true, 'half detached')
  await sql.unsafe(`alter table request_log_rows detach partition ${name(today - 4)}`)

  t.same(await dropExpiredPartitions(sql, 2, Date.now()), [today - 5, today - 4])
  const left = await sql<{ relname: string }[]>`
    select relname from pg_class where relname like 'request_log_rows_2%' and relkind = 'r' order by 1`
  t.same(
    left.map((row) => row.relname),
    [name(today)],
    'both are gone, the kept day stays',
  )
})

t.test('the embedded database makes, attaches, detaches and drops the same way', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'tgw-partitions-'))
  const store = await openStore({ databaseUrl: undefined, dataDir })
  t.teardown(async () => {
    await store.close()
    rmSync(dataDir, { recursive: true, force: true })
  })
  const { sql } = store
  await ensureRequestLogTable(sql)
  const today = dayOf(Date.now())
  for (const day of [today - 5, today - 1, today, today]) await ensurePartition(sql, day)
  t.same(await partitionDays(sql), [today - 5, today - 1, today])
  t.same(await dropExpiredPartitions(sql, 2, Date.now()), [today - 5])
  t.same(await partitionDays(sql), [today - 1, today])
  const left = await sql<{ relname: string }[]>`
    select relname from pg_class where relname like 'request_log_rows_2%' and relkind = 'r' order by 1`
  t.same(
    left.map((row) => row.relname),
    [today - 1, today].map(partitionName),
  )
})
