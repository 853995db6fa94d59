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

export function createPartitionStatement(day: number): string {
  const from = new Date(day * DAY_MS).toISOString()
  const to = new Date((day + 1) * DAY_MS).toISOString()
  return `create table if not exists ${partitionName(day)} partition of request_log_rows for values from ('${from}') to ('${to}')`
}

const PARTITION = /^request_log_rows_(\d{4})(\d{2})(\d{2})$/

/** The day a partition's name says, or null for a table that is not one. */
export function dayOfPartition(name: string): number | null {
  const match = PARTITION.exec(name)
  if (match === null) return null
  return dayOf(Date.UTC(Number(match[1]), Number(match[2]) - 1, Number(match[3])))
}

/** Makes the partition of `day` unless it exists (every replica may ask; the lock orders them). */
export async function ensurePartition(sql: Sql, day: number): Promise<void> {
  await sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(${SCHEMA_LOCK})`
    await tx.unsafe(createPartitionStatement(day))
  })
}

/** The partitions of the request log, by day, oldest first. */
export async function partitionDays(sql: Sql): Promise<number[]> {
  const rows = await sql<{ name: string }[]>`
    select child.relname as name from pg_inherits
    join pg_class parent on parent.oid = pg_inherits.inhparent
    join pg_class child on child.oid = pg_inherits.inhrelid
    where parent.relname = 'request_log_rows' and parent.relnamespace = to_regnamespace(current_schema())::oid`
  return rows
    .map((row) => dayOfPartition(row.name))
    .filter((day): day is number => day !== null)
    .sort((a, b) => a - b)
}

/**
 * Drops the partitions of the days that ended `retentionDays` or more ago: a record is kept at
 * least that long, and at most a day longer. Returns the days dropped.
 */
export async function dropExpiredPartitions(sql: Sql, retentionDays: number, nowMs: number): Promise<number[]> {
  const firstKept = dayOf(nowMs) - retentionDays
  const expired = (await partitionDays(sql)).filter((day) => day < firstKept)
  for (const day of expired) {
    await sql.begin(async (tx) => {
      await tx`select pg_advisory_xact_lock(${SCHEMA_LOCK})`
      await tx.unsafe(`drop table if exists ${partitionName(day)}`)
    })
  }
  return expired
}
