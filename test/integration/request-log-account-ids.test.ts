// The index of client ids keyed by their parent (request-log/account-ids-index.ts), on a log made
// before it: built in the background, partition by partition, while the log is written and read;
// a build cut short is made again; the old index of the ids alone goes once the new one is valid,
// without queueing the log's reads and writes behind its drop.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pino from 'pino'
import postgres from 'postgres'
import t, { type Test } from 'tap'
import {
  ACCOUNT_IDS_INDEX,
  accountIdsIndexed,
  BUILD_LOCK,
  buildAccountIdsIndex,
} from '../../src/request-log/account-ids-index.js'
import { dayOf, dropExpiredPartitions, ensurePartition, partitionName } from '../../src/request-log/partitions.js'
import { requestById } from '../../src/request-log/record-by-id.js'
import { ensureRequestLogTable } from '../../src/request-log/schema.js'
import { RequestLogWriter } from '../../src/request-log/writer.js'
import { openOneConnection, openStore, type Sql } from '../../src/store/db.js'
import { freshDatabase } from '../helpers/db.js'
import { holding } from '../helpers/held-transaction.js'
import { startGateway } from '../helpers/gateway.js'
import { orTimeout, until } from '../helpers/poll.js'
import { ACCOUNTS, logRecord, uuid } from '../helpers/request-records.js'

const OLD_INDEX = 'request_log_rows_given_ids'
const BUILDER = 'account-ids test builder'
/** The first day kept: none is past the retention. */
const KEEP_ALL = 0

/**
 * A log as a gateway from before the index left it: the index of the ids alone, none keyed by
 * account, two days' partitions, each parent's records with the same client ids. Then a start of
 * this build (ensureRequestLogTable), which declares the new index on the table alone.
 */
async function oldLog(t: Test, sql: Sql) {
  await ensureRequestLogTable(sql)
  const today = dayOf(Date.now())
  await ensurePartition(sql, today - 1)
  await ensurePartition(sql, today)
  await sql.unsafe(`drop index ${ACCOUNT_IDS_INDEX};
    create index ${OLD_INDEX} on request_log_rows using gin (given_ids) where given_ids is not null`)
  const writer = new RequestLogWriter({ sql, log: pino({ level: 'silent' }) })
  t.teardown(() => writer.close())
  for (const [i, accountId] of ACCOUNTS.entries())
    for (const [day, path] of [
      [today - 1, `/yesterday/${i}`],
      [today, `/today/${i}`],
    ] as const)
      writer.add(
        logRecord({
          id: 'retry-1',
          idGiven: true,
          path,
          accountId,
          tenantId: uuid(2, i),
          timeMs: day * 86_400_000 + 1,
        }),
      )
  await writer.flush()
  await ensureRequestLogTable(sql)
  t.equal(await accountIdsIndexed(sql), false, 'the new index is declared, not yet valid')
}

/** The indexes of the log's table by name, and whether each is valid. */
async function tableIndexes(sql: Sql) {
  const rows = await sql<{ name: string; valid: boolean }[]>`
    select c.relname as name, i.indisvalid as valid from pg_index i join pg_class c on c.oid = i.indexrelid
    where i.indrelid = to_regclass('request_log_rows') order by 1`
  return Object.fromEntries(rows.map((row) => [row.name, row.valid]))
}

/** The partitions that have their part of the new index, attached to it. */
async function partitionsIndexed(sql: Sql) {
  const [row] = await sql<{ n: number }[]>`
    select count(*)::int as n from pg_inherits where inhparent = to_regclass(${ACCOUNT_IDS_INDEX})`
  return row!.n
}

/** Each parent finds its own record of the id, the newest. */
async function lookups(t: Test, sql: Sql, what: string) {
  t.equal((await requestById(sql, ACCOUNTS[0]!, 'retry-1'))?.path, '/today/0', `${what}: the first parent's own`)
  t.equal((await requestById(sql, ACCOUNTS[1]!, 'retry-1'))?.path, '/today/1', `${what}: the second parent's own`)
}

/** A row of the log of today, with no records (what it holds does not matter here). */
const INSERT_ROW = `
  insert into request_log_rows (account_id, first_time, last_time, records, tenant_set, key_set, route_set,
    status_set, code_set, not_2xx, refused_tenant_set, refused_key_set, given_ids, ids, times_us, tenant_ids,
    key_ids, methods, routes, paths, statuses, codes, durations_us, request_bytes, response_bytes, source_ips)
  values ('${ACCOUNTS[1]}', now(), now(), 0, '{}', '{}', '{}', '{}', '{}', false, '{}', '{}', '{x}', '{}', '{}',
    '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}')`

t.test('on a log from before it, the index is built in the background while the log is written', async (t) => {
  const { sql, url } = await freshDatabase(t, { migrated: false })
  await oldLog(t, sql)
  await lookups(t, sql, 'before the build (the old index)')
  const open = (parameters: Record<string, string>) => openOneConnection(url, BUILDER, parameters)

  // Another replica builds it: this one leaves it alone.
  const other = postgres(url, { max: 1, onnotice: () => {}, fetch_types: false })
  t.teardown(() => other.end({ timeout: 1 }))
  await other`select pg_advisory_lock(${BUILD_LOCK})`
  t.equal(await buildAccountIdsIndex(sql, open, KEEP_ALL), false, 'not built while another replica holds the lock')
  t.equal(await partitionsIndexed(sql), 0)
  await other`select pg_advisory_unlock(${BUILD_LOCK})`

  // A write under way: the build waits for it, and the writes after it go on meanwhile. A plain
  // `create index` would queue them behind itself.
  const releaseWrite = await holding(url, INSERT_ROW)
  const building = buildAccountIdsIndex(sql, open, KEEP_ALL)
  const builderWaits = async () => {
    const [row] = await sql<{ waiting: boolean }[]>`
      select bool_or(wait_event_type = 'Lock') as waiting from pg_stat_activity where application_name = ${BUILDER}`
    return row?.waiting === true
  }
  t.ok(await until(10_000, builderWaits), 'the build waits for the write under way')
  t.equal(
    await orTimeout(
      sql.unsafe(INSERT_ROW).then(() => 'written'),
      10_000,
      'waited',
    ),
    'written',
    'a later write goes on',
  )
  t.equal(
    (await orTimeout(requestById(sql, ACCOUNTS[0]!, 'retry-1'), 10_000, null))?.path,
    '/today/0',
    'a lookup goes on',
  )
  // Another replica's start: its table and indexes are there, so it makes nothing (a `create index
  // if not exists` would wait behind the build, every write then behind it, and the start fail).
  t.equal(
    await orTimeout(
      ensureRequestLogTable(sql).then(() => 'started'),
      10_000,
      'waited',
    ),
    'started',
    "another replica's start goes on",
  )

  // Cut short (the gateway stopped): its partition's index is left invalid, and made again next time.
  const [{ pid }] = (await sql`
    select pid from pg_stat_activity where application_name = ${BUILDER} and wait_event_type = 'Lock'`) as unknown as [
    { pid: number },
  ]
  await sql`select pg_cancel_backend(${pid})`
  t.equal(
    await building.then(
      () => 'built',
      () => 'stopped',
    ),
    'stopped',
  )
  await releaseWrite()
  const leftovers = await sql<{ valid: boolean }[]>`
    select i.indisvalid as valid from pg_index i join pg_class c on c.oid = i.indexrelid
    where c.relname like 'request_log_rows_2%_account_ids'`
  t.ok(
    leftovers.some((index) => !index.valid),
    'the build cut short left an invalid index',
  )

  t.equal(await buildAccountIdsIndex(sql, open, KEEP_ALL), true, 'built at the next try')
  t.equal(await partitionsIndexed(sql), 2, 'each partition has its part')
  t.same(await tableIndexes(sql).then((indexes) => [indexes[ACCOUNT_IDS_INDEX], indexes[OLD_INDEX]]), [true, undefined])
  const invalid = await sql`select from pg_index where not indisvalid`
  t.equal(invalid.length, 0, 'no invalid index is left')
  await lookups(t, sql, 'after the build (keyed by account)')
  await ensurePartition(sql, dayOf(Date.now()) + 1)
  t.equal(await partitionsIndexed(sql), 3, 'a partition made later has it as it is attached')
})

t.test("an attach or the old index's drop gives up rather than queue the log's reads", async (t) => {
  const { sql, url } = await freshDatabase(t, { migrated: false })
  await oldLog(t, sql)
  const open = (parameters: Record<string, string>) => openOneConnection(url, BUILDER, parameters)

  // Today's part built by a build that stopped before its attach; then a read planned over the log
  // holds it (as every index of the tables it reads): the attach would wait for the read.
  const todays = `${partitionName(dayOf(Date.now()))}_account_ids`
  await sql.unsafe(`create index ${todays} on ${partitionName(dayOf(Date.now()))}
    using gin (request_log_account_ids(account_id, given_ids)) where given_ids is not null`)
  const oid = async () => (await sql<{ oid: number }[]>`select ${todays}::regclass::oid as oid`)[0]!.oid
  const built = await oid()
  let release = await holding(url, 'select count(*) from request_log_rows')
  t.equal(await buildAccountIdsIndex(sql, open, KEEP_ALL), false, "today's not attached while a read holds it")
  t.equal(await partitionsIndexed(sql), 1, "yesterday's built and attached")
  t.equal(
    (await orTimeout(requestById(sql, ACCOUNTS[0]!, 'retry-1'), 10_000, null))?.path,
    '/today/0',
    'a lookup went on meanwhile',
  )
  await release()

  // A read that holds the table: the new index is made whole, and the old one kept.
  release = await holding(url, 'lock table request_log_rows in access share mode')
  t.equal(
    await buildAccountIdsIndex(sql, open, KEEP_ALL),
    false,
    'attached, the old index kept while a read holds the table',
  )
  t.equal(await partitionsIndexed(sql), 2)
  t.equal(await oid(), built, "today's attached as it was built, not built again")
  t.same(await tableIndexes(sql).then((indexes) => [indexes[ACCOUNT_IDS_INDEX], indexes[OLD_INDEX]]), [true, true])
  await lookups(t, sql, 'both indexes there')
  await release()

  t.equal(await buildAccountIdsIndex(sql, open, KEEP_ALL), true, 'the old index goes at the next try')
  t.equal((await tableIndexes(sql))[OLD_INDEX], undefined)
})

t.test('partitions past or next to pass the retention are left to the sweep; whole once they go', async (t) => {
  const { sql, url } = await freshDatabase(t, { migrated: false })
  await oldLog(t, sql)
  const open = (parameters: Record<string, string>) => openOneConnection(url, BUILDER, parameters)
  const today = dayOf(Date.now())
  // Yesterday the first day kept, the next to expire: another replica's sweep may detach it any
  // time, and its detach would wait for a build of it (a deadlock, in a review).
  t.equal(await buildAccountIdsIndex(sql, open, today - 1), false, 'not whole while the next day to go lacks it')
  t.equal(await partitionsIndexed(sql), 1, "today's built and attached")
  const [yesterdays] = await sql<{ index: string | null }[]>`
    select to_regclass(${`${partitionName(today - 1)}_account_ids`})::text as index`
  t.equal(yesterdays?.index, null, "yesterday's not built")
  t.same(await dropExpiredPartitions(sql, 0, Date.now()), [today - 1], 'the sweep drops it')
  // Every partition left has its part, attached: the index is made valid by an attach again.
  t.equal(await buildAccountIdsIndex(sql, open, today - 1), true, 'whole at the next try')
  t.same(await tableIndexes(sql).then((indexes) => [indexes[ACCOUNT_IDS_INDEX], indexes[OLD_INDEX]]), [true, undefined])
  await lookups(t, sql, 'after the build')

  // With no partition left at all, the index is declared again on the table alone: valid at once.
  const { sql: empty, url: emptyUrl } = await freshDatabase(t, { migrated: false })
  await oldLog(t, empty)
  for (const day of [today - 1, today])
    await empty.unsafe(
      `alter table request_log_rows detach partition ${partitionName(day)}; drop table ${partitionName(day)}`,
    )
  const openEmpty = (parameters: Record<string, string>) => openOneConnection(emptyUrl, BUILDER, parameters)
  t.equal(await buildAccountIdsIndex(empty, openEmpty, KEEP_ALL), true, 'whole with no partition')
  t.same(await tableIndexes(empty).then((indexes) => [indexes[ACCOUNT_IDS_INDEX], indexes[OLD_INDEX]]), [
    true,
    undefined,
  ])
  await ensurePartition(empty, today)
  t.equal(await partitionsIndexed(empty), 1, 'a partition made after has it')
})

t.test('the embedded database builds it the same way, without `concurrently`', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'tgw-account-ids-'))
  const store = await openStore({ databaseUrl: undefined, dataDir })
  t.teardown(async () => {
    await store.close()
    rmSync(dataDir, { recursive: true, force: true })
  })
  await oldLog(t, store.sql)
  await lookups(t, store.sql, 'before the build')
  t.equal(await buildAccountIdsIndex(store.sql, undefined, KEEP_ALL), true)
  t.same(await tableIndexes(store.sql).then((indexes) => [indexes[ACCOUNT_IDS_INDEX], indexes[OLD_INDEX]]), [
    true,
    undefined,
  ])
  await lookups(t, store.sql, 'after the build')
})

t.test('a gateway started on a log from before the index builds it once serving', async (t) => {
  const database = await freshDatabase(t)
  await oldLog(t, database.sql)
  await startGateway(t, { database })
  const whole = async () => {
    const indexes = await tableIndexes(database.sql)
    return indexes[ACCOUNT_IDS_INDEX] === true && indexes[OLD_INDEX] === undefined
  }
  t.ok(await until(20_000, whole), 'the index is whole and the old one gone')
  await lookups(t, database.sql, 'keyed by account')
})
