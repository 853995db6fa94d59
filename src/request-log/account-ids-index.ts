// The request ids clients sent (X-Request-Id) in an index keyed by their parent: `<account> <id>`,
// so that a lookup by such an id (record-by-id.ts) reads its own parent's rows only. The index of
// the ids alone that came before listed every parent's rows holding an id: a lookup of an id that
// another parent sent a million times read all those rows (a second or more, and a 503 at busy
// times), and its time told that the other parent had sent it.
//
// A log made before this index has partitions already: the index is declared on the table alone
// (`on only`, not yet valid), then built partition by partition in the background, each
// `concurrently` so that the log's writes and reads go on, and attached; the last one attached
// makes it valid. Until then lookups read the old index, which is dropped once this one is valid.
// An attach and the drop wait for no read for long (LOCK_WAIT_MS): what did not get its lock is
// done at a later sweep. A partition made later (partitions.ts) gets the index as it is attached.
import type { Sql, Tx } from '../store/db.js'

/** The SQL function that keys a row's client ids by its account (an index's expression). */
export const ACCOUNT_IDS = 'request_log_account_ids'
export const ACCOUNT_IDS_INDEX = 'request_log_rows_account_ids'
/** The index of the client ids alone, which this one replaces. */
const OLD_INDEX = 'request_log_rows_given_ids'
/** Held by the replica that builds the index, on the connection that builds it. */
export const BUILD_LOCK = 7_346_120_022
/**
 * How long an attach of a partition's index, or the old index's drop, may wait for its lock: each
 * waits for the reads under way, and every read and write after it would queue behind it. Given
 * up, it is tried again at the next sweep.
 */
const LOCK_WAIT_MS = 200
const LOCK_NOT_AVAILABLE = '55P03'

/** A client's id as the index keys it, for the account's uuid in its text form. */
export const accountIdKey = (accountId: string, id: string) => `${accountId.toLowerCase()} ${id}`

/** Makes the index's function unless it exists (never replaced: the index holds what it made). */
export async function ensureAccountIdsFunction(tx: Tx): Promise<void> {
  const [found] = await tx<{ exists: boolean }[]>`
    select to_regprocedure(${`${ACCOUNT_IDS}(uuid, text[])`}) is not null as exists`
  if (found?.exists === true) return
  await tx.unsafe(`create function ${ACCOUNT_IDS}(account uuid, ids text[]) returns text[]
    language sql immutable strict parallel safe
    as $$ select array(select account::text || ' ' || id from unnest(ids) as id) $$`)
}

/** Whether the index is valid: every partition has its part of it. */
export async function accountIdsIndexed(sql: Sql | Tx): Promise<boolean> {
  const [index] = await sql<{ valid: boolean }[]>`
    select indisvalid as valid from pg_index where indexrelid = to_regclass(${ACCOUNT_IDS_INDEX})`
  return index?.valid === true
}

/**
 * Builds the index on each partition that lacks it, then drops the old index. True once both are
 * done; false when some of it is left for a later call (another replica builds it; a lock was not
 * to be had within LOCK_WAIT_MS). `openOwnConnection`: a client of one connection (store/db.ts),
 * which holds the build's lock and builds `concurrently`; without one (the embedded database,
 * which one process holds) the builds are plain statements.
 */
export async function buildAccountIdsIndex(
  sql: Sql,
  openOwnConnection: ((parameters: Record<string, string>) => Sql) | undefined,
): Promise<boolean> {
  if (!(await accountIdsIndexed(sql))) {
    if (openOwnConnection === undefined) {
      if (!(await buildPartitions(sql, ''))) return false
    } else {
      const own = openOwnConnection({})
      try {
        const [lock] = await own<{ held: boolean }[]>`select pg_try_advisory_lock(${BUILD_LOCK}) as held`
        if (lock?.held !== true || !(await buildPartitions(own, 'concurrently'))) return false
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
 * Each partition without its part of the index gets it, built `how`, then attached. False when an
 * attach did not get its lock: attaching locks the partition's index against every read and write
 * of the partition, so it is tried again later rather than queue them behind it.
 */
async function buildPartitions(sql: Sql, how: 'concurrently' | ''): Promise<boolean> {
  const partitions = await sql<{ partition: string; built: boolean | null }[]>`
    select c.relname as partition, (
      select i.indisvalid from pg_class x join pg_index i on i.indexrelid = x.oid
      where x.relname = c.relname || '_account_ids' and x.relnamespace = c.relnamespace
    ) as built
    from pg_inherits p join pg_class c on c.oid = p.inhrelid
    where p.inhparent = to_regclass('request_log_rows') and not exists (
      select from pg_index x join pg_inherits xi on xi.inhrelid = x.indexrelid
      where x.indrelid = c.oid and xi.inhparent = to_regclass(${ACCOUNT_IDS_INDEX}))
    order by c.relname`
  for (const { partition, built } of partitions) {
    const index = quoted(`${partition}_account_ids`)
    // Invalid: a build that a stop or a cancel cut short. Valid: built, its attach not done yet.
    if (built === false) await sql.unsafe(`drop index ${how} ${index}`)
    if (built !== true)
      await sql.unsafe(`create index ${how} ${index} on ${quoted(partition)}
        using gin (${ACCOUNT_IDS}(account_id, given_ids)) where given_ids is not null`)
    if (!(await withLockWait(sql, `alter index ${ACCOUNT_IDS_INDEX} attach partition ${index}`))) return false
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
