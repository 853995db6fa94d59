// Alerts' marks (docs/events.md, Alerts): each alert written once whatever the number of replicas.
// A mark's insert and its event share a transaction, and only the insert that wins writes the
// event; a replica that loses waits for the winner's commit and does nothing. SQL only.
import type { Sql, Tx } from './db.js'
import type { KeyRow } from './api-keys.js'

type Db = Sql | Tx

export type AlertKind =
  | 'usage.threshold_reached'
  | 'api_key.expiring'
  | 'credits.low'
  | 'credits.exhausted'
  | 'credits.expired'

/** Inserts the mark; true when this transaction made it (and so writes its event). */
export async function claimMark(tx: Tx, kind: AlertKind, subject: string, mark: string): Promise<boolean> {
  const rows = await tx`
    insert into alert_marks (kind, subject, mark) values (${kind}, ${subject}, ${mark})
    on conflict do nothing returning 1`
  return rows.length === 1
}

/**
 * A roll's new key takes the expiry marks its predecessor was given: their end was announced, and
 * a subscriber that rolls on `api_key.expiring` must not be told again (nor roll again).
 */
export async function inheritKeyMarks(tx: Tx, fromKeyId: string, toKeyId: string): Promise<void> {
  await tx`
    insert into alert_marks (kind, subject, mark)
    select kind, ${toKeyId}, mark from alert_marks where kind = 'api_key.expiring' and subject = ${fromKeyId}
    on conflict do nothing`
}

/** The parent account a tenant belongs to (itself for a parent account); null when it is gone. */
export async function accountOf(db: Db, tenantId: string): Promise<string | null> {
  const [row] = await db<{ account_id: string }[]>`
    select coalesce(parent_id, id) as account_id from tenants where id = ${tenantId}`
  return row?.account_id ?? null
}

/** Deletes marks older than `before`: no month or key they name can be alerted again by then. */
export async function deleteMarksBefore(db: Db, before: Date): Promise<number> {
  const result = await db`delete from alert_marks where created_at < ${before}`
  return result.count
}

/**
 * Locks the key's row as a roll or a revoke changing it does, so that each waits for the other, and
 * tells whether the key is still due its event: active, not ended at `now`, never rolled. A mark
 * made under the lock is one a roll then passes on (inheritKeyMarks).
 */
export async function lockExpiringKey(tx: Tx, keyId: string, now: Date): Promise<boolean> {
  const [key] = await tx<{ due: boolean }[]>`
    select status = 'active' and expires_at > ${now} as due from api_keys where id = ${keyId} for share`
  if (key?.due !== true) return false
  // A statement of its own: its snapshot, taken once the lock is held, sees a roll committed meanwhile.
  const successors = await tx`select 1 from api_keys where rolled_from = ${keyId} limit 1`
  return successors.length === 0
}

/** A key due for an `api_key.expiring` mark, with its account (a parent's own key: its own). */
export interface ExpiringKey extends KeyRow {
  account_id: string
  /** The most urgent mark due (1 before 7): the one whose event is written. */
  days: number
  /** Every mark due and not made yet, the most urgent included. */
  due_days: number[]
}

/**
 * Active keys within `days` of their expires_at for some mark not made yet, at `now` (the alerts'
 * clock), minted inside it or not; never a key that was rolled: its end was the parent's plan.
 */
export async function expiringKeys(db: Db, marks: readonly number[], now: Date, limit: number): Promise<ExpiringKey[]> {
  return db<ExpiringKey[]>`
    with due as (
      select k.id, m.days
      from api_keys k
      cross join (select value::int as days from jsonb_array_elements_text(${db.json([...marks])})) as m
      where k.status = 'active' and k.expires_at > ${now}
        and k.expires_at <= ${now}::timestamptz + make_interval(days => m.days)
        and not exists (select 1 from api_keys successor where successor.rolled_from = k.id)
        -- A mark as near or nearer made already (a 1-day one, which the rule before the prompt
        -- sweeps gave a key minted within 7 days alone): nothing farther is told after it.
        and not exists (
          select 1 from alert_marks a
          where a.kind = 'api_key.expiring' and a.subject = k.id::text and rtrim(a.mark, 'd')::int <= m.days)
    ), keys as (
      select id, min(days) as days, to_jsonb(array_agg(days order by days)) as due_days
      from due group by id order by id limit ${limit}
    )
    select k.id, k.tenant_id, k.name, to_jsonb(k.scopes) as scopes, k.prefix, k.status, k.created_at,
           k.revoked_at, k.last_used_at, k.expires_at, k.rolled_from,
           coalesce(t.parent_id, t.id) as account_id, keys.days, keys.due_days
    from keys join api_keys k on k.id = keys.id join tenants t on t.id = k.tenant_id
    order by k.id`
}

/** One tenant's rate refusals of one policy, as a replica counted them since its last flush. */
export interface RefusalCount {
  tenantId: string
  policy: string
  refused: number
}

/** A rate alert's row once this replica's refusals are added (and locked until the commit). */
export interface RateAlertRow {
  tenant_id: string
  policy: string
  refused: string
  counting_since: Date
  last_event_at: Date | null
}

/**
 * Adds refusals to their rows, made at `now` if new, in key order (replicas adding at once lock
 * rows in the same order: no deadlock). The rows stay locked until the transaction ends.
 */
export function addRefusals(tx: Tx, counts: readonly RefusalCount[], now: Date): Promise<RateAlertRow[]> {
  return tx<RateAlertRow[]>`
    insert into rate_limit_alerts as r (tenant_id, policy, refused, counting_since)
    select tenant_id, policy, refused, ${now}
    from jsonb_to_recordset(${tx.json(counts.map((c) => ({ tenant_id: c.tenantId, policy: c.policy, refused: c.refused })))})
      as added (tenant_id uuid, policy text, refused bigint)
    order by tenant_id, policy
    on conflict (tenant_id, policy) do update set refused = r.refused + excluded.refused
    returning tenant_id, policy, refused::text, counting_since, last_event_at`
}

/** The row, locked, if it has refusals no event reported and its last event was at `lastEventBy` or before. */
export async function dueRateAlert(
  tx: Tx,
  tenantId: string,
  policy: string,
  lastEventBy: Date,
): Promise<RateAlertRow | null> {
  const [row] = await tx<RateAlertRow[]>`
    select tenant_id, policy, refused::text, counting_since, last_event_at from rate_limit_alerts
    where tenant_id = ${tenantId} and policy = ${policy} and refused > 0
      and (last_event_at is null or last_event_at <= ${lastEventBy})
    for update`
  return row ?? null
}

/** The event was written at `now`: its refusals are reported, the next count starts. */
export async function rateAlertWritten(tx: Tx, tenantId: string, policy: string, now: Date): Promise<void> {
  await tx`
    update rate_limit_alerts set refused = 0, last_event_at = ${now}, counting_since = ${now}
    where tenant_id = ${tenantId} and policy = ${policy}`
}
