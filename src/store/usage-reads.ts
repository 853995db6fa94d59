// Reads of usage counts (docs/api.md, usage report and usage by key): pages of sub-accounts or
// keys with their counts by day, and their units. The writes are in store/usage.ts.
import type { Sql, Tx } from './db.js'
import { Statement } from './statement.js'

type Db = Sql | Tx

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
