// The request log's daily partitions: made when a day's first records are written, and dropped
// whole once the day is past the retention (docs/operations.md, the request log).
import type { Sql } from '../store/db.js'

/** Held while a replica makes the table or a partition: two replicas starting together wait in turn. */
export const SCHEMA_LOCK = 7_346_120_019

export const DAY_MS = 86_400_000

/** The UTC day of an instant, as days since the epoch. */
export function dayOf(ms: number): number {
  return Math.floor(ms / DAY_MS)
}

/** Microseconds, whole, as Postgres keeps a time (and the log a record's time and duration). */
export function micros(ms: number): number {
  return Math.round(ms * 1000)
}

/** The UTC day of a record's time as it is kept (to the microsecond): its row's partition. */
export function dayOfRecord(timeMs: number): number {
  return Math.floor(micros(timeMs) / (DAY_MS * 1000))
}

/** `request_log_rows_20261123`: the partition of a day. */
export function partitionName(day: number): string {
  return `request_log_rows_${new Date(day * DAY_MS).toISOString().slice(0, 10).replaceAll('-', '')}`
}

/** The bounds of a day's partition, as `attach partition` takes them. */
function partitionBounds(day: number): string {
  const from = new Date(day * DAY_MS).toISOString()
  const to = new Date((day + 1) * DAY_MS).toISOString()
  return `for values from ('${from}') to ('${to}')`
}

const PARTITION = /^request_log_rows_(\d{4})(\d{2})(\d{2})$/

/** The day a partition's name says, or null for a table that is not one. */
export function dayOfPartition(name: string): number | null {
  const match = PARTITION.exec(name)
  if (match === null) return null
  return dayOf(Date.UTC(Number(match[1]), Number(match[2]) - 1, Number(match[3])))
}

/**
 * Makes the partition of `day` unless it exists (every replica may ask; the lock orders them). It
 * is made apart, then attached: attaching locks the table against other changes of its own kind
 * only. A `partition of` would lock it whole, wait for every read under way, and make every read
 * and write after it queue behind.
 */
export async function ensurePartition(sql: Sql, day: number): Promise<void> {
  const name = partitionName(day)
  await sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(${SCHEMA_LOCK})`
    const [table] = await tx<{ attached: boolean }[]>`
      select exists (select from pg_inherits where inhrelid = c.oid) as attached from pg_class c
      where relname = ${name} and relnamespace = to_regnamespace(current_schema())::oid`
    if (table?.attached === true) return
    if (table === undefined)
      await tx.unsafe(`create table ${name} (like request_log_rows
        including defaults including constraints including storage including compression)`)
    await tx.unsafe(`alter table request_log_rows attach partition ${name} ${partitionBounds(day)}`)
  })
}

/** The partitions of the request log, by day, oldest first. */
export async function partitionDays(sql: Sql): Promise<number[]> {
  return (await partitionTables(sql)).filter((table) => table.attached).map((table) => table.day)
}

interface PartitionTable {
  day: number
  name: string
  /** Still a partition of the log (a detach under way or cut short included). */
  attached: boolean
}

/** The tables named as a day's partition, attached or not (a drop cut short leaves one), oldest first. */
async function partitionTables(sql: Sql): Promise<PartitionTable[]> {
  const rows = await sql<{ name: string; attached: boolean }[]>`
    select c.relname as name, exists (
      select from pg_inherits where inhrelid = c.oid and inhparent = to_regclass('request_log_rows')) as attached
    from pg_class c
    where c.relkind = 'r' and c.relname like 'request\\_log\\_rows\\_%'
      and c.relnamespace = to_regnamespace(current_schema())::oid`
  return rows
    .map((row) => ({ ...row, day: dayOfPartition(row.name) }))
    .filter((table): table is PartitionTable => table.day !== null)
    .sort((a, b) => a.day - b.day)
}

/**
 * Drops the partitions of the days that ended `retentionDays` or more ago: a record is kept at
 * least that long, and at most a day longer. Returns the days dropped.
 *
 * Each is detached first, concurrently: that waits for the reads under way, which go on, and
 * later reads no longer see it; then it is dropped alone. Dropping an attached partition would
 * lock the whole table, as a `partition of` would. Replicas may sweep together: a detach another
 * finished or is finishing fails or waits here, and what is then left decides.
 */
export async function dropExpiredPartitions(sql: Sql, retentionDays: number, nowMs: number): Promise<number[]> {
  const firstKept = dayOf(nowMs) - retentionDays
  const dropped: number[] = []
  for (const { day, name, attached } of (await partitionTables(sql)).filter((table) => table.day < firstKept)) {
    if (attached) {
      const detach = (how: string) => sql.unsafe(`alter table request_log_rows detach partition ${name} ${how}`)
      // `finalize` ends a detach that a stop cut short; a concurrent detach refuses to start then.
      await detach('concurrently')
        .catch(() => detach('finalize'))
        .catch(async (err) => {
          if ((await partitionTables(sql)).some((table) => table.name === name && table.attached)) throw err
        })
    }
    await sql.unsafe(`drop table if exists ${name}`)
    dropped.push(day)
  }
  return dropped
}
