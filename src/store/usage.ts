// Usage counts (docs/api.md) and keys' last use, written. SQL only; what a flush carries is
// store/usage-batch.ts's, the batching lives in usage/meter.ts, the reads in store/usage-reads.ts.
import type { Sql, Tx } from './db.js'
import {
  BATCH_MEMORY,
  type FlushMark,
  keyUnitJson,
  keyUsageJson,
  logDropJson,
  type UsageBatch,
  unitJson,
  usageJson,
} from './usage-batch.js'

type Db = Sql | Tx

/**
 * Adds one flush's counts, once: in one statement, the batch id is recorded and the counts are
 * added, unless the id was already recorded (a retry of a flush that committed
 * but whose reply was lost). Rows are inserted in the order of their key, so two replicas flushing at once lock
 * rows in the same order and cannot deadlock. The rows travel as one JSON document: one statement
 * text whatever their number, where a VALUES list would prepare (and keep, per connection, on both
 * sides) a new statement for every row count. JSON, not arrays: postgres.js serialises no arrays
 * here (fetch_types is off, see postgres-options.ts). Returns false for a batch already applied.
 *
 * A replica's flush carries its `mark` (usage_flush_marks, which closes periods) and holds the
 * close row FOR SHARE: units of a period closed meanwhile go to the first open one, as late
 * units, and a close waits for the flush (docs/billing.md). Without a mark (a test seeding
 * history), periods are written as given. What reconciliation compares the units with goes to
 * usage_period_checks by the period they were served in, never moved.
 */
export async function addUsage(sql: Sql, batchId: string, batch: UsageBatch): Promise<boolean> {
  const { counts, keyCounts = [], unitCounts = [], keyUnitCounts = [], logDropCounts = [], mark, since } = batch
  const empty = [counts, keyCounts, unitCounts, keyUnitCounts, logDropCounts].every((rows) => rows.length === 0)
  if (empty) {
    if (mark !== undefined) await markFlushed(sql, mark)
    return true
  }
  // One statement, so one implicit transaction: postgres.js can crash the process when a
  // connection closes in the middle of an explicit one (porsager/postgres#1208).
  const [result] = await sql<{ applied: boolean }[]>`
    with batch as (
      insert into usage_batches (id) values (${batchId}) on conflict (id) do nothing returning id
    ), closed as (
      select case when ${mark !== undefined} then closed_until end as until
      from usage_close where id for share
    ), marked as (
      insert into usage_flush_marks (replica_id, flushed_through)
      select ${mark?.replicaId ?? null}::uuid, ${mark?.through ?? null}::timestamptz where ${mark !== undefined}
      on conflict (replica_id) do update
      set flushed_through = greatest(usage_flush_marks.flushed_through, excluded.flushed_through), seen_at = now()
    ), recovered as (
      -- Back after it was taken for lost (a partition, a long outage): it lost nothing, as this
      -- flush of what it held says (store/usage-periods.ts).
      delete from usage_replica_losses where ${mark !== undefined} and replica_id = ${mark?.replicaId ?? null}::uuid
    ), added as (
      insert into usage_daily (tenant_id, day, status_class, requests, forwarded, limited_rate, limited_quota)
      select tenant_id, day, status_class, requests, forwarded, limited_rate, limited_quota
      from jsonb_to_recordset(${sql.json(counts.map(usageJson))})
        as row (tenant_id uuid, day date, status_class smallint, requests bigint, forwarded bigint,
                limited_rate bigint, limited_quota bigint)
      where exists (select 1 from batch)
      order by tenant_id, day, status_class
      on conflict (tenant_id, day, status_class)
      do update set requests = least(usage_daily.requests, 9007199254740991 - excluded.requests) + excluded.requests,
                    forwarded = least(usage_daily.forwarded, 9007199254740991 - excluded.forwarded) + excluded.forwarded,
                    limited_rate = least(usage_daily.limited_rate, 9007199254740991 - excluded.limited_rate) + excluded.limited_rate,
                    limited_quota = least(usage_daily.limited_quota, 9007199254740991 - excluded.limited_quota) + excluded.limited_quota
    ), added_by_key as (
      insert into usage_daily_keys (tenant_id, day, key_id, status_class, requests)
      select tenant_id, day, key_id, status_class, requests
      from jsonb_to_recordset(${sql.json(keyCounts.map(keyUsageJson))})
        as row (tenant_id uuid, day date, key_id uuid, status_class smallint, requests bigint)
      where exists (select 1 from batch)
      order by tenant_id, day, key_id, status_class
      on conflict (tenant_id, day, key_id, status_class)
      do update set requests = least(usage_daily_keys.requests, 9007199254740991 - excluded.requests) + excluded.requests
    ), unit_input as (
      select * from jsonb_to_recordset(${sql.json(unitCounts.map(unitJson))})
        as row (tenant_id uuid, period_start timestamptz, meter text, units bigint, requests bigint,
                charged bigint, unlimited bigint)
    ), unit_rows as (
      -- A closed period's units move to the first open one: the closed periods of a batch may
      -- land on one row, so they are added up before the upsert (which may touch a row once).
      select row.tenant_id, greatest(row.period_start, closed.until) as period_start, row.meter,
             least(sum(row.units), 9007199254740991) as units, least(sum(row.requests), 9007199254740991) as requests,
             least(sum(case when row.period_start < closed.until then row.units else 0 end), 9007199254740991) as late_units
      from unit_input row left join closed on true
      group by 1, 2, 3
    ), credit_use as (
      -- A meter's units burn the sub-account's live grants of it, in the burn order, in this
      -- statement: the credits' use in Postgres is what the meter wrote (store/credit-grants.ts).
      select tenant_id, meter, sum(units) as units
      from unit_rows where exists (select 1 from batch) group by 1, 2
    ), credit_periods as (
      -- The periods of the batch's units, in time order, each at its place along the meter's
      -- units: a grant's burn is logged in the periods whose units took it.
      select tenant_id, meter, period_start, units,
             coalesce(sum(units) over (partition by tenant_id, meter order by period_start
                                       rows between unbounded preceding and 1 preceding), 0) as before
      from unit_rows where exists (select 1 from batch)
    ), credit_locked as (
      select g.id, g.sub_account_id, g.meter, g.units_left, g.priority, g.expires_at, g.seq
      from credit_grants g
      where (g.sub_account_id, g.meter) in (select tenant_id, meter from credit_use)
        and g.voided_at is null and g.units_left > 0
        and (g.expires_at is null or g.expires_at > coalesce(${since ?? null}::timestamptz, now()))
      order by g.id
      for update
    ), credit_order as (
      select l.*, coalesce(sum(l.units_left) over (partition by l.sub_account_id, l.meter
                           order by l.priority, l.expires_at nulls last, l.seq
                           rows between unbounded preceding and 1 preceding), 0) as before
      from credit_locked l
    ), credit_taken as (
      select o.id, o.sub_account_id, o.meter, o.before, least(o.units_left, u.units - o.before) as units
      from credit_order o join credit_use u on u.tenant_id = o.sub_account_id and u.meter = o.meter
      where u.units > o.before
    ), credit_burned as (
      update credit_grants g set units_left = g.units_left - t.units from credit_taken t where g.id = t.id
    ), credit_burn_log as (
      -- Each grant's units [before, before + units) of the meter's, split by the periods whose
      -- units [before, before + units) overlap them.
      insert into credit_burns (grant_id, period_start, units)
      select t.id, p.period_start, least(t.before + t.units, p.before + p.units) - greatest(t.before, p.before)
      from credit_taken t join credit_periods p on p.tenant_id = t.sub_account_id and p.meter = t.meter
      where least(t.before + t.units, p.before + p.units) > greatest(t.before, p.before)
      order by t.id, p.period_start
      on conflict (grant_id, period_start) do update set units = credit_burns.units + excluded.units
    ), credit_owed as (
      -- Beyond every live grant, under a credit limit in force (its own or its plan's, as
      -- shared/plan-limits.ts decides): owed by the next grant.
      insert into credit_debts (sub_account_id, meter, units)
      select u.tenant_id, u.meter, u.units - coalesce(sum(o.units_left), 0)
      from credit_use u
      join tenants t on t.id = u.tenant_id
      -- A join, not a subquery of the parent per row: Postgres ran that twice a row (EXPLAIN, 5,000
      -- rows over 20,100 tenants: 30,403 buffers and 25 ms, against 703 and 12 ms).
      left join tenants d on d.id = t.parent_id
      left join plans p on p.id = coalesce(t.plan_id, d.default_plan_id)
      left join credit_order o on o.sub_account_id = u.tenant_id and o.meter = u.meter
      where t.limits -> 'credits' ? u.meter or p.limits -> 'credits' ? u.meter
      group by u.tenant_id, u.meter, u.units
      having u.units > coalesce(sum(o.units_left), 0)
      order by 1, 2
      on conflict (sub_account_id, meter) do update set units = credit_debts.units + excluded.units
    ), check_rows as (
      select tenant_id, period_start, meter, least(sum(served), 9007199254740991) as served,
             least(sum(charged), 9007199254740991) as charged, least(sum(unlimited), 9007199254740991) as unlimited,
             least(sum(late_out), 9007199254740991) as late_out, least(sum(dropped), 9007199254740991) as dropped
      from (
        select row.tenant_id, row.period_start, row.meter, row.units as served, row.charged, row.unlimited,
               case when row.period_start < closed.until then row.units else 0 end as late_out, 0 as dropped
        from unit_input row left join closed on true
        union all
        select tenant_id, period_start, meter, 0, 0, 0, 0, units
        from jsonb_to_recordset(${sql.json(logDropCounts.map(logDropJson))})
          as row (tenant_id uuid, period_start timestamptz, meter text, units bigint)
      ) as both_kinds
      group by 1, 2, 3
    ), added_checks as (
      insert into usage_period_checks (tenant_id, period_start, meter, served_units, limiter_units, unlimited_units,
                                       late_out_units, log_dropped_units)
      select tenant_id, period_start, meter, served, charged, unlimited, late_out, dropped from check_rows
      where exists (select 1 from batch)
      order by tenant_id, period_start, meter
      on conflict (tenant_id, period_start, meter)
      do update set served_units = least(usage_period_checks.served_units, 9007199254740991 - excluded.served_units) + excluded.served_units,
                    limiter_units = least(usage_period_checks.limiter_units, 9007199254740991 - excluded.limiter_units) + excluded.limiter_units,
                    unlimited_units = least(usage_period_checks.unlimited_units, 9007199254740991 - excluded.unlimited_units) + excluded.unlimited_units,
                    late_out_units = least(usage_period_checks.late_out_units, 9007199254740991 - excluded.late_out_units) + excluded.late_out_units,
                    log_dropped_units = least(usage_period_checks.log_dropped_units, 9007199254740991 - excluded.log_dropped_units) + excluded.log_dropped_units
    ), added_units as (
      insert into usage_period_units (tenant_id, period_start, meter, units, requests, late_units)
      select tenant_id, period_start, meter, units, requests, late_units from unit_rows
      where exists (select 1 from batch)
      order by tenant_id, period_start, meter
      on conflict (tenant_id, period_start, meter)
      do update set units = least(usage_period_units.units, 9007199254740991 - excluded.units) + excluded.units,
                    requests = least(usage_period_units.requests, 9007199254740991 - excluded.requests) + excluded.requests,
                    late_units = least(usage_period_units.late_units, 9007199254740991 - excluded.late_units) + excluded.late_units
    ), added_key_units as (
      insert into usage_daily_key_units (tenant_id, day, key_id, meter, units)
      select tenant_id, day, key_id, meter, units
      from jsonb_to_recordset(${sql.json(keyUnitCounts.map(keyUnitJson))})
        as row (tenant_id uuid, day date, key_id uuid, meter text, units bigint)
      where exists (select 1 from batch)
      order by tenant_id, day, key_id, meter
      on conflict (tenant_id, day, key_id, meter)
      do update set units = least(usage_daily_key_units.units, 9007199254740991 - excluded.units) + excluded.units
    ), pruned as (
      delete from usage_batches where flushed_at < now() - ${BATCH_MEMORY}::interval
    )
    select exists (select 1 from batch) as applied`
  return result!.applied
}

/** A flush with nothing to add: the replica's mark moves on alone (store/usage-periods.ts reads it). */
async function markFlushed(sql: Sql, mark: FlushMark): Promise<void> {
  await sql`
    with marked as (
      insert into usage_flush_marks (replica_id, flushed_through) values (${mark.replicaId}, ${mark.through})
      on conflict (replica_id) do update
      set flushed_through = greatest(usage_flush_marks.flushed_through, excluded.flushed_through), seen_at = now()
    )
    delete from usage_replica_losses where replica_id = ${mark.replicaId}`
}

/** Sets last_used_at where it is older (a slower replica never moves it back). */
export async function touchKeys(db: Db, uses: readonly { keyId: string; at: Date }[]): Promise<void> {
  if (uses.length === 0) return
  await db`
    update api_keys set last_used_at = used.at
    from jsonb_to_recordset(${db.json(uses.map((u) => ({ id: u.keyId, at: u.at.toISOString() })))}) as used (id uuid, at timestamptz)
    where api_keys.id = used.id and (api_keys.last_used_at is null or api_keys.last_used_at < used.at)`
}
