// The requests a limit simulation replays (docs/api.md, The limit simulator): a parent's
// sub-accounts' records of a range that reached the limits, forwarded or refused by one, in the
// order they arrived, with what each counted (its route's cost, the units its upstream reported).
import type { Sql } from '../store/db.js'
import { readSettings } from './queries.js'

/** One record as the simulator replays it. */
export interface ReplayRecord {
  tenant_id: string
  /** When it arrived, µs since the epoch (as the log keeps it). */
  time_us: string
  duration_us: string
  /** Its route's cost (kept negative for a request the gateway refused: read back positive). */
  cost: number
  /** The units its upstream reported, JSON by meter; null when none. */
  units: string | null
}

/** The refusals of a limit: what a replay counts as having reached the limits, beside the forwarded. */
const LIMIT_REFUSALS = '{rate_limited,quota_exceeded}'

export interface ReplayRange {
  accountId: string
  /** One sub-account, or every sub-account of the account (null). */
  tenantId: string | null
  from: Date
  to: Date
}

/** How many records the rows that overlap the range hold, at most: a bound read from the rows' summaries. */
export async function replayRecordBound(sql: Sql, range: ReplayRange, statementTimeoutMs?: number): Promise<number> {
  return sql.begin(async (tx) => {
    await readSettings(tx, statementTimeoutMs)
    const [row] = await tx<{ n: string }[]>`
      select coalesce(sum(r.records), 0)::text as n from request_log_rows r
      where r.account_id = ${range.accountId} and r.last_time >= ${range.from} and r.first_time < ${range.to}
        and (${range.tenantId}::uuid is null or ${range.tenantId}::uuid = any(r.tenant_set))`
    return Number(row!.n)
  })
}

/** The range's records that reached the limits, of sub-accounts only, in arrival order. */
export async function replayRecords(
  sql: Sql,
  range: ReplayRange,
  statementTimeoutMs?: number,
): Promise<ReplayRecord[]> {
  const records: ReplayRecord[] = []
  await replayBatches(sql, range, statementTimeoutMs, async (batch) => {
    for (const record of batch) records.push(record)
  })
  return records
}

/** Records a batch: Postgres reads the next while the caller replays this one. */
const BATCH_RECORDS = 10_000

/** `replayRecords` a batch at a time, in order, each handed to `each` before the next is read. */
export async function replayBatches(
  sql: Sql,
  range: ReplayRange,
  statementTimeoutMs: number | undefined,
  each: (records: readonly ReplayRecord[]) => Promise<void>,
): Promise<void> {
  const fromUs = range.from.getTime() * 1000
  const toUs = range.to.getTime() * 1000
  await sql.begin(async (tx) => {
    await readSettings(tx, statementTimeoutMs)
    await tx<ReplayRecord[]>`
      select x.tenant_id, x.time_us::text, x.duration_us::text, abs(x.cost) as cost, x.units
      from request_log_rows r
        cross join lateral unnest(r.tenant_ids, r.times_us, r.durations_us, r.costs, r.units, r.codes)
          as x (tenant_id, time_us, duration_us, cost, units, code)
      where r.account_id = ${range.accountId} and r.last_time >= ${range.from} and r.first_time < ${range.to}
        and (${range.tenantId}::uuid is null or ${range.tenantId}::uuid = any(r.tenant_set))
        and x.time_us >= ${fromUs} and x.time_us < ${toUs}
        and x.tenant_id <> ${range.accountId}
        and (${range.tenantId}::uuid is null or x.tenant_id = ${range.tenantId}::uuid)
        and (x.cost > 0 or x.code = any(${LIMIT_REFUSALS}::text[]))
      order by x.time_us`.cursor(BATCH_RECORDS, (rows) => each(rows))
  })
}

/**
 * Units of the forwarded requests that arrived in [from, to), by sub-account and meter
 * (`<tenant> <meter>` → units): the part of a month's use before a simulation's range that the
 * usage periods cannot split (the one `from` falls in).
 */
export async function forwardedUnitsBetween(
  sql: Sql,
  accountId: string,
  from: Date,
  to: Date,
  statementTimeoutMs?: number,
): Promise<Map<string, number>> {
  if (to <= from) return new Map()
  const rows = await sql.begin(async (tx) => {
    await readSettings(tx, statementTimeoutMs)
    return tx<{ tenant_id: string; meter: string; units: string }[]>`
      select x.tenant_id, m.meter, sum(m.units)::text as units
      from request_log_rows r
        cross join lateral unnest(r.tenant_ids, r.times_us, r.costs, r.units) as x (tenant_id, time_us, cost, units)
        cross join lateral (
          select 'requests' as meter, x.cost::int8 as units
          union all
          select reported.key, reported.value::int8 from jsonb_each_text(coalesce(x.units, '{}')::jsonb) as reported
        ) as m
      where r.account_id = ${accountId} and r.last_time >= ${from} and r.first_time < ${to}
        and x.cost > 0 and x.time_us >= ${from.getTime() * 1000} and x.time_us < ${to.getTime() * 1000}
        and x.tenant_id <> ${accountId}
      group by 1, 2`
  })
  return new Map(rows.map((row) => [`${row.tenant_id} ${row.meter}`, Number(row.units)]))
}
