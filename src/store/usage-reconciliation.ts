// SQL of usage reconciliation (docs/billing.md, Reconciliation): per tenant and meter of a range,
// the usage meter's units, what it served, what limits charged, the units of dropped request log
// records, and what was exported. The request log's own count is read apart (request-log/
// unit-sums.ts): it may live in another Postgres.
import type { Sql } from './db.js'

/** One tenant's counts of one meter over a range; bigints as text. `closed_*`: of periods closed. */
export interface ReconciliationCounts {
  tenant_id: string
  account_id: string
  /** Null for the parent's own use. */
  sub_account_id: string | null
  meter: string
  meter_units: string
  closed_meter_units: string
  /** By the periods the requests were served in (usage_period_checks). */
  served_units: string
  closed_served_units: string
  limiter_units: string
  unlimited_units: string
  closed_log_dropped_units: string
  exported_units: string
}

export interface ReconciliationRange {
  from: Date
  to: Date
  /** One parent's account (its own use and its sub-accounts'), or every account. */
  accountId: string | null
  /**
   * The push's receiver (store/usage-export.ts): exported is what it acknowledged. Null with no
   * push: exported is what a pull of the closed periods gives.
   */
  pushTarget: string | null
}

export function reconciliationCounts(sql: Sql, range: ReconciliationRange): Promise<ReconciliationCounts[]> {
  const { from, to, accountId, pushTarget } = range
  return sql<ReconciliationCounts[]>`
    with closed as (
      select coalesce(closed_until, '-infinity'::timestamptz) as until from usage_close where id
    ), acknowledged as (
      select period_start, tenant_id, meter from usage_export_cursors where target = ${pushTarget}
    ), scope as (
      select id, parent_id from tenants
      where ${accountId}::uuid is null or id = ${accountId} or parent_id = ${accountId}
    ), units as (
      select u.tenant_id, u.meter, sum(u.units) as meter_units,
             coalesce(sum(u.units) filter (where u.period_start < closed.until), 0) as closed_meter_units,
             coalesce(sum(u.units) filter (where u.period_start < closed.until and (${pushTarget}::text is null
               or (u.period_start, u.tenant_id, u.meter) <= (a.period_start, a.tenant_id, a.meter))), 0) as exported_units
      from usage_period_units u join scope on scope.id = u.tenant_id
        cross join closed left join acknowledged a on true
      where u.period_start >= ${from} and u.period_start < ${to}
      group by 1, 2
    ), checks as (
      select c.tenant_id, c.meter, sum(c.served_units) as served_units,
             coalesce(sum(c.served_units) filter (where c.period_start < closed.until), 0) as closed_served_units,
             sum(c.limiter_units) as limiter_units, sum(c.unlimited_units) as unlimited_units,
             coalesce(sum(c.log_dropped_units) filter (where c.period_start < closed.until), 0) as closed_log_dropped_units
      from usage_period_checks c join scope on scope.id = c.tenant_id cross join closed
      where c.period_start >= ${from} and c.period_start < ${to}
      group by 1, 2
    )
    select scope.id as tenant_id, coalesce(scope.parent_id, scope.id) as account_id,
           case when scope.parent_id is null then null else scope.id end as sub_account_id,
           meter, coalesce(units.meter_units, 0)::text as meter_units,
           coalesce(units.closed_meter_units, 0)::text as closed_meter_units,
           coalesce(checks.served_units, 0)::text as served_units,
           coalesce(checks.closed_served_units, 0)::text as closed_served_units,
           coalesce(checks.limiter_units, 0)::text as limiter_units,
           coalesce(checks.unlimited_units, 0)::text as unlimited_units,
           coalesce(checks.closed_log_dropped_units, 0)::text as closed_log_dropped_units,
           coalesce(units.exported_units, 0)::text as exported_units
    from units full join checks using (tenant_id, meter) join scope on scope.id = tenant_id
    where coalesce(units.meter_units, 0) > 0 or coalesce(checks.served_units, 0) > 0
    order by coalesce(scope.parent_id, scope.id), scope.parent_id is not null, scope.id, meter`
}
