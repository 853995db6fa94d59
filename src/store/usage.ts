// Usage counts (docs/api.md) and keys' last use. SQL only; the batching lives in usage/meter.ts.
import type { Sql, Tx } from './db.js'
import { Statement } from './statement.js'

type Db = Sql | Tx

export interface UsageCount {
  tenantId: string
  /** UTC date, YYYY-MM-DD. */
  day: string
  /** 2 … 5 */
  statusClass: number
  requests: number
  /** Of `requests`, those forwarded upstream (what a monthly quota counts); 0 if absent. */
  forwarded?: number
  /** 429s of a rate limit and of a monthly quota (on the 4xx row only); 0 if absent. */
  limitedRate?: number
  limitedQuota?: number
}

/** A key's requests of one day and status class, for the tenant it acted as (usage by key). */
export interface KeyUsageCount {
  tenantId: string
  keyId: string
  day: string
  statusClass: number
  requests: number
}

/** Units of a tenant acted as, in one usage period, of one meter (usage_period_units). */
export interface PeriodUnitCount {
  tenantId: string
  /** The period's start, ISO 8601 UTC. */
  periodStart: string
  meter: string
  units: number
  /** The forwarded requests that counted them. */
  requests: number
}

/** A key's units of one day and meter, for the tenant it acted as (usage_daily_key_units). */
export interface KeyUnitCount {
  tenantId: string
  keyId: string
  day: string
  meter: string
  units: number
}

/** How long a flush's id is remembered: a retry later than that could add its counts twice. */
export const BATCH_MEMORY = '1 day'

/**
 * Adds one flush's counts, once: in one statement, the batch id is recorded and the counts are
 * added, unless the id was already recorded (a retry of a flush that committed
 * but whose reply was lost). Rows are inserted in the order of their key, so two replicas flushing at once lock
 * rows in the same order and cannot deadlock. The rows travel as one JSON document: one statement
 * text whatever their number, where a VALUES list would prepare (and keep, per connection, on both
 * sides) a new statement for every row count. JSON, not arrays: postgres.js serialises no arrays
 * here (fetch_types is off, see db.ts). Returns false for a batch already applied.
 */
export async function addUsage(
  sql: Sql,
  batchId: string,
  counts: readonly UsageCount[],
  keyCounts: readonly KeyUsageCount[] = [],
  unitCounts: readonly PeriodUnitCount[] = [],
  keyUnitCounts: readonly KeyUnitCount[] = [],
): Promise<boolean> {
  if (counts.length === 0 && keyCounts.length === 0 && unitCounts.length === 0 && keyUnitCounts.length === 0)
    return true
  // One statement, so one implicit transaction: postgres.js can crash the process when a
  // connection closes in the middle of an explicit one (porsager/postgres#1208).
  const [result] = await sql<{ applied: boolean }[]>`
    with batch as (
      insert into usage_batches (id) values (${batchId}) on conflict (id) do nothing returning id
    ), added as (
      insert into usage_daily (tenant_id, day, status_class, requests, forwarded, limited_rate, limited_quota)
      select tenant_id, day, status_class, requests, forwarded, limited_rate, limited_quota
      from jsonb_to_recordset(${sql.json(counts.map(usageJson))})
        as row (tenant_id uuid, day date, status_class smallint, requests bigint, forwarded bigint,
                limited_rate bigint, limited_quota bigint)
      where exists (select 1 from batch)
      order by tenant_id, day, status_class
      on conflict (tenant_id, day, status_class)
      do update set requests = usage_daily.requests + excluded.requests,
                    forwarded = usage_daily.forwarded + excluded.forwarded,
                    limited_rate = usage_daily.limited_rate + excluded.limited_rate,
                    limited_quota = usage_daily.limited_quota + excluded.limited_quota
    ), added_by_key as (
      insert into usage_daily_keys (tenant_id, day, key_id, status_class, requests)
      select tenant_id, day, key_id, status_class, requests
      from jsonb_to_recordset(${sql.json(keyCounts.map(keyUsageJson))})
        as row (tenant_id uuid, day date, key_id uuid, status_class smallint, requests bigint)
      where exists (select 1 from batch)
      order by tenant_id, day, key_id, status_class
      on conflict (tenant_id, day, key_id, status_class)
      do update set requests = usage_daily_keys.requests + excluded.requests
    ), added_units as (
      insert into usage_period_units (tenant_id, period_start, meter, units, requests)
      select tenant_id, period_start, meter, units, requests
      from jsonb_to_recordset(${sql.json(unitCounts.map(unitJson))})
        as row (tenant_id uuid, period_start timestamptz, meter text, units bigint, requests bigint)
      where exists (select 1 from batch)
      order by tenant_id, period_start, meter
      on conflict (tenant_id, period_start, meter)
      do update set units = usage_period_units.units + excluded.units,
                    requests = usage_period_units.requests + excluded.requests
    ), added_key_units as (
      insert into usage_daily_key_units (tenant_id, day, key_id, meter, units)
      select tenant_id, day, key_id, meter, units
      from jsonb_to_recordset(${sql.json(keyUnitCounts.map(keyUnitJson))})
        as row (tenant_id uuid, day date, key_id uuid, meter text, units bigint)
      where exists (select 1 from batch)
      order by tenant_id, day, key_id, meter
      on conflict (tenant_id, day, key_id, meter)
      do update set units = usage_daily_key_units.units + excluded.units
    ), pruned as (
      delete from usage_batches where flushed_at < now() - ${BATCH_MEMORY}::interval
    )
    select exists (select 1 from batch) as applied`
  return result!.applied
}

const usageJson = (c: UsageCount) => ({
  tenant_id: c.tenantId,
  day: c.day,
  status_class: c.statusClass,
  requests: c.requests,
  forwarded: c.forwarded ?? 0,
  limited_rate: c.limitedRate ?? 0,
  limited_quota: c.limitedQuota ?? 0,
})

const keyUsageJson = (c: KeyUsageCount) => ({
  tenant_id: c.tenantId,
  key_id: c.keyId,
  day: c.day,
  status_class: c.statusClass,
  requests: c.requests,
})

const unitJson = (c: PeriodUnitCount) => ({
  tenant_id: c.tenantId,
  period_start: c.periodStart,
  meter: c.meter,
  units: c.units,
  requests: c.requests,
})

const keyUnitJson = (c: KeyUnitCount) => ({
  tenant_id: c.tenantId,
  key_id: c.keyId,
  day: c.day,
  meter: c.meter,
  units: c.units,
})

/** Sets last_used_at where it is older (a slower replica never moves it back). */
export async function touchKeys(db: Db, uses: readonly { keyId: string; at: Date }[]): Promise<void> {
  if (uses.length === 0) return
  await db`
    update api_keys set last_used_at = used.at
    from jsonb_to_recordset(${db.json(uses.map((u) => ({ id: u.keyId, at: u.at.toISOString() })))}) as used (id uuid, at timestamptz)
    where api_keys.id = used.id and (api_keys.last_used_at is null or api_keys.last_used_at < used.at)`
}

export interface UsageRow {
  seq: string
  id: string
  external_id: string | null
  name: string
  day: string
  status_class: number
  requests: string
  limited_rate: string
  limited_quota: string
}

/**
 * One page of the parent's sub-accounts that have usage between `from` and `to` (inclusive),
 * oldest first, with their counts by day and status class. `limit` counts sub-accounts;
 * `subAccountId` keeps that one only (none if it is not the parent's).
 */
export function usageRows(
  db: Db,
  parentId: string,
  range: { from: string; to: string; afterSeq: string | null; limit: number; subAccountId?: string | null },
): Promise<UsageRow[]> {
  const s = new Statement()
  const [from, to] = [s.param(range.from), s.param(range.to)]
  return s.runPlannedEachTime<UsageRow[]>(
    db,
    `with page as (
      select t.seq, t.id, t.external_id, t.name from tenants t
      where t.parent_id = ${s.param(parentId)}
        ${range.afterSeq === null ? '' : `and t.seq > ${s.param(range.afterSeq)}`}
        ${range.subAccountId == null ? '' : `and t.id = ${s.param(range.subAccountId)}`}
        and exists (
          select 1 from usage_daily u where u.tenant_id = t.id and u.day between ${from} and ${to})
      order by t.seq
      limit ${s.param(range.limit)}
    )
    select page.seq::text as seq, page.id, page.external_id, page.name,
           u.day::text as day, u.status_class, u.requests::text as requests,
           u.limited_rate::text as limited_rate, u.limited_quota::text as limited_quota
    from page join usage_daily u on u.tenant_id = page.id and u.day between ${from} and ${to}
    order by page.seq, u.day, u.status_class`,
  )
}

export interface KeyUsageRow {
  seq: string
  key_id: string
  name: string | null
  prefix: string | null
  /** The tenant that owns the key: the sub-account itself, or its parent (acting as it). */
  key_tenant_id: string | null
  day: string
  status_class: number
  requests: string
}

/**
 * One page of the keys that made requests acting as `subAccountId` between `from` and `to`
 * (inclusive), in the order they were made (api_keys.seq), with their counts by day and status
 * class. `limit` counts keys.
 */
export function keyUsageRows(
  db: Db,
  subAccountId: string,
  range: { from: string; to: string; afterSeq: string | null; limit: number },
): Promise<KeyUsageRow[]> {
  const s = new Statement()
  const [tenant, from, to] = [s.param(subAccountId), s.param(range.from), s.param(range.to)]
  return s.runPlannedEachTime<KeyUsageRow[]>(
    db,
    `with used as (
      select distinct u.key_id from usage_daily_keys u
      where u.tenant_id = ${tenant} and u.day between ${from} and ${to}
    ), page as (
      select k.seq, k.id, k.name, k.prefix, k.tenant_id from used join api_keys k on k.id = used.key_id
      ${range.afterSeq === null ? '' : `where k.seq > ${s.param(range.afterSeq)}`}
      order by k.seq
      limit ${s.param(range.limit)}
    )
    select page.seq::text as seq, page.id as key_id, page.name, page.prefix, page.tenant_id as key_tenant_id,
           u.day::text as day, u.status_class, u.requests::text as requests
    from page join usage_daily_keys u
      on u.tenant_id = ${tenant} and u.key_id = page.id and u.day between ${from} and ${to}
    order by page.seq, u.day, u.status_class`,
  )
}

export interface UnitRow {
  tenant_id: string
  day: string
  meter: string
  units: string
}

/** The units of these tenants between `from` and `to` (inclusive UTC days), by day and meter. */
export async function unitRows(
  db: Db,
  tenantIds: readonly string[],
  range: { from: string; to: string },
): Promise<UnitRow[]> {
  if (tenantIds.length === 0) return []
  // The ids as one JSON document: one statement text whatever their number (see addUsage).
  // Whole UTC days: the periods divide a day, so each falls within one.
  return db<UnitRow[]>`
    select u.tenant_id, (u.period_start at time zone 'UTC')::date::text as day, u.meter, sum(u.units)::text as units
    from usage_period_units u
    where u.tenant_id in (select value::uuid from jsonb_array_elements_text(${db.json(tenantIds as string[])}))
      and u.period_start >= ${range.from}::date::timestamp at time zone 'UTC'
      and u.period_start < (${range.to}::date + 1)::timestamp at time zone 'UTC'
    group by 1, 2, 3
    order by 1, 2, 3`
}

export interface KeyUnitRow {
  key_id: string
  day: string
  meter: string
  units: string
}

/** The units of these keys acting as `subAccountId` between `from` and `to` (inclusive), by day and meter. */
export async function keyUnitRows(
  db: Db,
  subAccountId: string,
  keyIds: readonly string[],
  range: { from: string; to: string },
): Promise<KeyUnitRow[]> {
  if (keyIds.length === 0) return []
  return db<KeyUnitRow[]>`
    select u.key_id, u.day::text as day, u.meter, u.units::text as units
    from usage_daily_key_units u
    where u.tenant_id = ${subAccountId} and u.key_id in (select value::uuid from jsonb_array_elements_text(${db.json(keyIds as string[])}))
      and u.day between ${range.from} and ${range.to}
    order by 1, 2, 3`
}
