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
export async function addUsage(sql: Sql, batchId: string, counts: readonly UsageCount[]): Promise<boolean> {
  if (counts.length === 0) return true
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
      select t.seq, t.id, t.external_id from tenants t
      where t.parent_id = ${s.param(parentId)}
        ${range.afterSeq === null ? '' : `and t.seq > ${s.param(range.afterSeq)}`}
        ${range.subAccountId == null ? '' : `and t.id = ${s.param(range.subAccountId)}`}
        and exists (
          select 1 from usage_daily u where u.tenant_id = t.id and u.day between ${from} and ${to})
      order by t.seq
      limit ${s.param(range.limit)}
    )
    select page.seq::text as seq, page.id, page.external_id,
           u.day::text as day, u.status_class, u.requests::text as requests,
           u.limited_rate::text as limited_rate, u.limited_quota::text as limited_quota
    from page join usage_daily u on u.tenant_id = page.id and u.day between ${from} and ${to}
    order by page.seq, u.day, u.status_class`,
  )
}
