// The request log's count of units for reconciliation (docs/billing.md, Reconciliation): per
// tenant and meter, the units of the forwarded requests whose answers ended in a range (the period
// the usage meter counted them in), split at the end of the closed periods.
import type { Sql } from '../store/db.js'
import { readSettings } from './queries.js'
import { DAY_MS, dayOf } from './partitions.js'

/** Units of one tenant and meter as the log holds them; bigints as text. */
export interface LogUnitSum {
  account_id: string
  tenant_id: string
  meter: string
  closed_units: string
  open_units: string
}

/**
 * The sums over [from, to), of one account or of all; null when the log may no longer hold the
 * whole range: the day before `from`'s is one its retention drops (partitions.ts,
 * dropExpiredPartitions keeps the last `retentionDays` days and today). A record counts by its end
 * (its start plus its duration, as kept): a request that began the day before `from` is still
 * found; one that ran longer than a day is not. `statementTimeoutMs`: an API call's bound.
 */
export async function logUnitSums(
  sql: Sql,
  range: { from: Date; to: Date; accountId: string | null; closedUntil: Date | null },
  retention: { days: number; nowMs: number; statementTimeoutMs?: number; maxRows?: number },
): Promise<LogUnitSum[] | null> {
  if (dayOf(range.from.getTime()) - 1 < dayOf(retention.nowMs) - retention.days) return null
  const fromUs = range.from.getTime() * 1000
  const toUs = range.to.getTime() * 1000
  const closedUs = range.closedUntil === null ? Number.MIN_SAFE_INTEGER : range.closedUntil.getTime() * 1000
  const firstDay = new Date((dayOf(range.from.getTime()) - 1) * DAY_MS)
  // The account's rows by their index, planned for its value; every account's only for the CLI.
  const account = range.accountId === null ? sql`true` : sql`r.account_id = ${range.accountId}`
  return sql.begin(async (tx) => {
    await readSettings(tx, retention.statementTimeoutMs)
    return tx<LogUnitSum[]>`
    select r.account_id, x.tenant_id, m.meter,
           coalesce(sum(m.units) filter (where x.time_us + x.duration_us < ${closedUs}), 0)::text as closed_units,
           coalesce(sum(m.units) filter (where x.time_us + x.duration_us >= ${closedUs}), 0)::text as open_units
    from request_log_rows r
      cross join lateral unnest(r.tenant_ids, r.times_us, r.durations_us, r.costs, r.units)
        as x (tenant_id, time_us, duration_us, cost, units)
      cross join lateral (
        select 'requests' as meter, x.cost::int8 as units
        union all
        select reported.key, reported.value::int8 from jsonb_each_text(coalesce(x.units, '{}')::jsonb) as reported
      ) as m
    where ${account}
      and r.first_time >= ${firstDay} and r.first_time < ${range.to}
      and x.cost > 0 and x.time_us + x.duration_us >= ${fromUs} and x.time_us + x.duration_us < ${toUs}
    group by 1, 2, 3
    ${retention.maxRows === undefined ? sql`` : sql`limit ${retention.maxRows + 1}`}`
  })
}
