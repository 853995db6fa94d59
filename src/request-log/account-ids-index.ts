// The request ids clients sent (X-Request-Id) in an index keyed by their parent, so that a lookup
// by such an id (record-by-id.ts) reads its own parent's rows only. The index of the ids alone that
// came before listed every parent's rows holding an id: a lookup of an id that another parent sent
// a million times read all those rows (a second or more, and a 503 at busy times), and its time
// told that the other parent had sent it.
//
// A log made before this index has partitions already: the index is declared on the table alone
// (`on only`, not yet valid), then built a partition at a time in the background, each
// `concurrently` so that the log's writes and reads go on, and attached; once every partition has
// it, an attach makes it valid. Until then lookups read the old index, which is dropped once this
// one is valid. An attach and the drop wait for no read for long (LOCK_WAIT_MS): what did not get
// its lock is done at a later sweep. A partition made later (partitions.ts) gets the index as it
// is attached; one past the retention, or the next to pass it, is left to the sweep, which drops it.
import type { Sql, Tx } from '../store/db.js'
import { dayOfPartition } from './partitions.js'

/** The SQL function that keys a row's client ids by its account (the index's expression). */
export const ACCOUNT_IDS_FUNCTION = 'request_log_account_ids'
export const ACCOUNT_IDS_INDEX = 'request_log_rows_account_ids'
/** The index of the client ids alone, which this one replaces. */
const OLD_INDEX = 'request_log_rows_given_ids'
/** Held by the replica that builds the index, on the connection that builds it. */
export const BUILD_LOCK = 7_346_120_022
/**
 * How long an attach of a partition's index, or the old index's drop, may wait for its lock: each
 * waits for the reads under way, and every read and write after it would queue behind it.
 */
const LOCK_WAIT_MS = 200
const LOCK_NOT_AVAILABLE = '55P03'
/** An attach of an index that does not match the table's (invalid_object_definition). */
const NOT_THE_INDEX = '42P17'
/**
 * A client's id is keyed by 48 bits of a hash of its account's id (12 hex digits of its MD5), so
 * that two parents share a key in about one deployment in five million with 10,000 parents, whatever
 * their UUIDs' version (a UUIDv7's first digits are its time). A shared key only makes a lookup
 * read the other's rows too (the account is checked again): the whole UUID made the index twice
 * the size of the ids' alone, the hash half again (bench/README.md).
 */
const KEY_DIGITS = 12

/** Makes the index's function unless it exists (never replaced: the index holds what it made). */
export async function ensureAccountIdsFunction(tx: Tx): Promise<void> {
  const [found] = await tx<{ exists: boolean }[]>`
    select to_regprocedure(${`${ACCOUNT_IDS_FUNCTION}(uuid, text[])`}) is not null as exists`
  if (found?.exists === true) return
  await tx.unsafe(`create function ${ACCOUNT_IDS_FUNCTION}(account uuid, ids text[]) returns text[]
    language sql immutable strict parallel safe
    as $$ select array(select hashed || ' ' || id from unnest(ids) as id)
      from (select left(md5(account::text), ${KEY_DIGITS}) as hashed) account_key $$`)
}

/** Whether the index is valid: every partition has its part of it. */
export async function accountIdsIndexed(sql: Sql | Tx): Promise<boolean> {
  const [index] = await sql<{ valid: boolean }[]>`
    select indisvalid as valid from pg_index where indexrelid = to_regclass(${ACCOUNT_IDS_INDEX})`
  return index?.valid === true
}

/**
 * Builds the index on each partition kept (after `firstKeptDay`, the next to expire) that lacks it,
 * makes it valid, then drops the old index. True once all of that is done; false when some of it is left for a
 * later call (another replica builds; a lock was not to be had within LOCK_WAIT_MS; partitions past
 * the retention still lack it). `openOwnConnection`: a client of one connection (store/db.ts), which
 * holds the build's lock and builds `concurrently`; without one (the embedded database, which one
 * process holds) the builds are plain statements.
 */
export async function buildAccountIdsIndex(
  sql: Sql,
  openOwnConnection: ((parameters: Record<string, string>) => Sql) | undefined,
  firstKeptDay: number,
): Promise<boolean> {
  if (!(await accountIdsIndexed(sql))) {
    if (openOwnConnection === undefined) {
      if (!(await buildPartitions(sql, '', firstKeptDay))) return false
    } else {
      // No server or role default may cut a build short: it would, at every try.
      const own = openOwnConnection({ statement_timeout: '0', lock_timeout: '0' })
      try {
        const [lock] = await own<{ held: boolean }[]>`select pg_try_advisory_lock(${BUILD_LOCK}) as held`
        if (lock?.held !== true || !(await buildPartitions(own, 'concurrently', firstKeptDay))) return false
      } finally {
        await own.end({ timeout: 5 }) // and with its session, the lock
      }
    }
    if (!(await accountIdsIndexed(sql))) return false
  }
  return withLockWait(sql, `drop index if exists ${OLD_INDEX}`)
}

const quoted = (name: string) => `"${name.replaceAll('"', '""')}"`

/**
 * Each partition kept that lacks its part of the index gets it, built `how`, then attached; then,
 * should the index still be invalid with every partition's attached (some lacked it and were
 * dropped instead), an attach again makes it valid. False when an attach did not get its lock
 * (attaching locks the partition's index against every read and write of the partition), or when
 * partitions past the retention still lack it.
 */
async function buildPartitions(sql: Sql, how: 'concurrently' | '', firstKeptDay: number): Promise<boolean> {
  // A partition whose detach is under way (or was cut short) is on its way out: left alone.
  const partitions = await sql<{ partition: string; built: boolean | null }[]>`
    select c.relname as partition, (
      select i.indisvalid from pg_class x join pg_index i on i.indexrelid = x.oid
      where x.relname = c.relname || '_account_ids' and x.relnamespace = c.relnamespace
    ) as built
    from pg_inherits p join pg_class c on c.oid = p.inhrelid
    where p.inhparent = to_regclass('request_log_rows') and not p.inhdetachpending and not exists (
      select from pg_index x join pg_inherits xi on xi.inhrelid = x.indexrelid
      where x.indrelid = c.oid and xi.inhparent = to_regclass(${ACCOUNT_IDS_INDEX}))
    order by c.relname`
  // Past the retention, or within a day of it: the sweep drops them. A build of one would hold up
  // its detach (and the next day's attach behind it), which another replica's sweep may start at
  // any time, and the two then deadlock.
  const expired = partitions.filter(({ partition }) => (dayOfPartition(partition) ?? Infinity) <= firstKeptDay)
  for (const { partition, built } of partitions) {
    if (expired.some((table) => table.partition === partition)) continue
    const index = quoted(`${partition}_account_ids`)
    // Invalid: a build that was canceled. Valid: built, its attach not done yet (a stop ends the
    // build's connection, and the server finishes the build).
    if (built === false) await sql.unsafe(`drop index ${how} ${index}`)
    if (built !== true)
      await sql.unsafe(`create index ${how} ${index} on ${quoted(partition)}
        using gin (${ACCOUNT_IDS_FUNCTION}(account_id, given_ids)) where given_ids is not null`)
    const attached = await withLockWait(sql, `alter index ${ACCOUNT_IDS_INDEX} attach partition ${index}`).catch(
      async (err) => {
        if ((err as { code?: string }).code !== NOT_THE_INDEX) throw err
        // An index of that name that is not this one's part (made by hand): made again next time.
        await sql.unsafe(`drop index ${how} ${index}`)
        return false
      },
    )
    if (!attached) return false
  }
  if (expired.length > 0) return false
  if (!(await accountIdsIndexed(sql))) {
    const [attached] = await sql<{ index: string }[]>`
      select c.relname as index from pg_inherits p join pg_class c on c.oid = p.inhrelid
      where p.inhparent = to_regclass(${ACCOUNT_IDS_INDEX}) limit 1`
    // No partition at all: the index declared again on the table alone is valid at once.
    const statement =
      attached === undefined
        ? `drop index ${ACCOUNT_IDS_INDEX}; create index ${ACCOUNT_IDS_INDEX} on only request_log_rows
            using gin (${ACCOUNT_IDS_FUNCTION}(account_id, given_ids)) where given_ids is not null`
        : `alter index ${ACCOUNT_IDS_INDEX} attach partition ${quoted(attached.index)}`
    if (!(await withLockWait(sql, statement))) return false
  }
  return true
}

/**
 * Runs `statement` if its locks come within LOCK_WAIT_MS; false when they did not. An attach or a
 * drop of an index waits for the reads under way, and every read and write after it waits behind.
 */
async function withLockWait(sql: Sql, statement: string): Promise<boolean> {
  try {
    await sql.begin(async (tx) => {
      await tx.unsafe(`set local lock_timeout = ${LOCK_WAIT_MS}`)
      await tx.unsafe(statement)
    })
    return true
  } catch (err) {
    if ((err as { code?: string }).code === LOCK_NOT_AVAILABLE) return false
    throw err
  }
}
