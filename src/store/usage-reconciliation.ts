// SQL of usage reconciliation (docs/billing.md, Reconciliation): per tenant and meter of a range,
// the usage meter's units, what it served, what limits charged, the units of dropped request log
// records, and what was exported. The request log's own count is read apart (request-log/
// unit-sums.ts): it may live in another Postgres.
import type { Sql } from './db.js'
import { exportCursor } from './usage-export.js'

/** One tenant's counts of one meter over a range; bigints as text. `closed_*`: of periods closed. */
export interface ReconciliationCounts {
  tenant_id: string
  account_id: string
  /** Null for the parent's own use. */
  sub_account_id: string | null
  meter: string
  meter_units: string
  closed_meter_units: string
  /** Of the meter's units, those flushed after the period they were served in had closed. */
  late_units: string
  closed_late_units: string
  /** By the periods the requests were served in (usage_period_checks). */
  served_units: string
  closed_served_units: string
  limiter_units: string
  unlimited_units: string
  /** Served in the range, billed in a later period as late units. */
  late_out_units: string
  closed_late_out_units: string
  closed_log_dropped_units: string
  exported_units: string
}

export interface ReconciliationRange {
  from: Date
  to: Date
  /** One parent's account (its own use and its sub-accounts'), or every account. */
  accountId: string | null
  /** Where the closed periods end (store/usage-periods.ts), as the caller read it for the log too. */
  closedUntil: Date | null
  /**
   * The push's receiver (store/usage-export.ts): exported is what it acknowledged. Null with no
   * push: exported is what a pull of the closed periods gives.
   */
  pushTarget: string | null
  /** At most this many rows of each count are read (more: TooManyRows); none: every row (the CLI). */
  maxRows?: number
}

type Tenant = Pick<ReconciliationCounts, 'tenant_id' | 'account_id' | 'sub_account_id' | 'meter'>
type UnitSums = Tenant &
  Pick<
    ReconciliationCounts,
    'meter_units' | 'closed_meter_units' | 'late_units' | 'closed_late_units' | 'exported_units'
  >
type CheckSums = Tenant & Omit<ReconciliationCounts, keyof UnitSums>

/** A tenant and meter's counts where a table has no row of it. */
export const NO_COUNTS: Omit<ReconciliationCounts, keyof Tenant> = {
  meter_units: '0',
  closed_meter_units: '0',
  late_units: '0',
  closed_late_units: '0',
  exported_units: '0',
  served_units: '0',
  closed_served_units: '0',
  limiter_units: '0',
  unlimited_units: '0',
  late_out_units: '0',
  closed_late_out_units: '0',
  closed_log_dropped_units: '0',
}

/**
 * The counts of a range, by tenant and meter with use, ordered by account, the parent's own use
 * first, then sub-account and meter. Two statements at once, one a table, on two connections: each
 * sums a month of 10^4 sub-accounts' periods in about 1.5 s (bench/README.md, usage export). The
 * close (the caller's, which splits the log's count too) and the receiver's cursor are passed in
 * as values (joined in, they cost a second more), and the account's tenants are a semi-join.
 */
/** A range with more sub-accounts' meters than `maxRows`: its answer would outgrow a replica's heap. */
export class TooManyRows extends Error {}

export async function reconciliationCounts(sql: Sql, range: ReconciliationRange): Promise<ReconciliationCounts[]> {
  const { from, to, accountId, pushTarget } = range
  // Nothing closed yet: before any period there is.
  const closed = range.closedUntil ?? new Date('0001-01-01T00:00:00Z')
  // With a push, what its cursor acknowledged (nothing yet: none); without one, every closed record.
  const cursor = pushTarget === null ? null : await exportCursor(sql, pushTarget)
  const everything = cursor === null
  const acknowledged = cursor?.period_start != null
  const inScope = () =>
    sql`(select id from tenants where ${accountId}::uuid is null or id = ${accountId} or parent_id = ${accountId})`
  const tenant = () => sql`t.id as tenant_id, coalesce(t.parent_id, t.id) as account_id,
    case when t.parent_id is null then null else t.id end as sub_account_id, s.meter`
  // One row past the bound tells it is passed, without reading the rest.
  const bounded = () => (range.maxRows === undefined ? sql`` : sql`limit ${range.maxRows + 1}`)
  const [units, checks] = await Promise.all([
    sql<UnitSums[]>`
      select ${tenant()}, s.meter_units::text, s.closed_meter_units::text, s.late_units::text,
             s.closed_late_units::text, s.exported_units::text
      from (
        select u.tenant_id, u.meter, sum(u.units) as meter_units,
               coalesce(sum(u.units) filter (where u.period_start < ${closed}), 0) as closed_meter_units,
               sum(u.late_units) as late_units,
               coalesce(sum(u.late_units) filter (where u.period_start < ${closed}), 0) as closed_late_units,
               coalesce(sum(u.units) filter (where u.period_start < ${closed} and (${everything} or (${acknowledged}
                 and (u.period_start, u.tenant_id, u.meter)
                     <= (${cursor?.period_start ?? null}::timestamptz, ${cursor?.tenant_id ?? null}::uuid, ${cursor?.meter ?? null}::text)))), 0)
                 as exported_units
        from usage_period_units u
        where u.period_start >= ${from} and u.period_start < ${to} and u.tenant_id in ${inScope()}
        group by 1, 2
      ) as s join tenants t on t.id = s.tenant_id
      where s.meter_units > 0 ${bounded()}`,
    sql<CheckSums[]>`
      select ${tenant()}, s.served_units::text, s.closed_served_units::text, s.limiter_units::text,
             s.unlimited_units::text, s.late_out_units::text, s.closed_late_out_units::text,
             s.closed_log_dropped_units::text
      from (
        select c.tenant_id, c.meter, sum(c.served_units) as served_units,
               coalesce(sum(c.served_units) filter (where c.period_start < ${closed}), 0) as closed_served_units,
               sum(c.limiter_units) as limiter_units, sum(c.unlimited_units) as unlimited_units,
               sum(c.late_out_units) as late_out_units,
               coalesce(sum(c.late_out_units) filter (where c.period_start < ${closed}), 0) as closed_late_out_units,
               coalesce(sum(c.log_dropped_units) filter (where c.period_start < ${closed}), 0) as closed_log_dropped_units
        from usage_period_checks c
        where c.period_start >= ${from} and c.period_start < ${to} and c.tenant_id in ${inScope()}
        group by 1, 2
      ) as s join tenants t on t.id = s.tenant_id ${bounded()}`,
  ])
  if (range.maxRows !== undefined && Math.max(units.length, checks.length) > range.maxRows) throw new TooManyRows()
  const byKey = new Map<string, ReconciliationCounts>()
  for (const row of [...units, ...checks]) {
    const key = `${row.tenant_id} ${row.meter}`
    byKey.set(key, { ...(byKey.get(key) ?? NO_COUNTS), ...row })
  }
  return [...byKey.values()]
    .filter((row) => row.meter_units !== '0' || row.served_units !== '0')
    .sort((a, b) => compare(orderOf(a), orderOf(b)))
}

/** Account, the parent's own use first, tenant, meter: uuids compare as their lowercase text does. */
const orderOf = (row: ReconciliationCounts) => [
  row.account_id,
  row.sub_account_id === null ? '0' : '1',
  row.tenant_id,
  row.meter,
]

function compare(a: readonly string[], b: readonly string[]): number {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i]! < b[i]! ? -1 : 1
  return 0
}
