// SQL of the usage export's push (docs/billing.md, Pushing the export): the receiver's cursor, the
// lease that lets one replica export at a time, and the closed records after the cursor.
import type { Sql } from './db.js'
import { type ExportRow, RECORD_CREDITS } from './usage-periods.js'

/** Where a receiver stands: the last record it acknowledged, and its retries. */
export interface ExportCursor {
  period_start: Date | null
  tenant_id: string | null
  meter: string | null
  attempts: number
  /** The next attempt may go now (no failure waits). */
  due: boolean
}

/** A record to push, with its place in the push's order. */
export type PushRow = ExportRow & { tenant_id: string }

/**
 * Takes or renews the lease on `target` for `holder`, unless another replica holds an unexpired
 * one; returns the cursor when this replica holds it, null otherwise.
 */
export async function claimExport(
  sql: Sql,
  { target, holder, leaseSeconds }: { target: string; holder: string; leaseSeconds: number },
): Promise<ExportCursor | null> {
  const [row] = await sql<ExportCursor[]>`
    insert into usage_export_cursors (target, holder, lease_until)
    values (${target}, ${holder}, now() + make_interval(secs => ${leaseSeconds}))
    on conflict (target) do update set holder = excluded.holder, lease_until = excluded.lease_until
    where usage_export_cursors.holder = excluded.holder or usage_export_cursors.holder is null
       or usage_export_cursors.lease_until < now()
    returning period_start, tenant_id, meter, attempts,
              next_attempt_at is null or next_attempt_at <= now() as due`
  return row ?? null
}

/** Gives the lease up (a replica stopping), so another takes over at its next tick. */
export async function releaseExport(sql: Sql, target: string, holder: string): Promise<void> {
  await sql`update usage_export_cursors set holder = null, lease_until = null where target = ${target} and holder = ${holder}`
}

/** Up to `limit` closed records after the cursor, in (period_start, tenant_id, meter) order. */
export function recordsAfter(sql: Sql, cursor: ExportCursor, limit: number): Promise<PushRow[]> {
  const after = cursor.period_start !== null
  return sql<PushRow[]>`
    select u.tenant_id, coalesce(t.parent_id, t.id) as account_id,
           case when t.parent_id is null then null else t.id end as sub_account_id,
           -- The external_id at the close (a closed period never changes; migration 028).
           case when u.closed_at is null then t.external_id else u.external_id_at_close end as external_id,
           u.meter, u.units::text as units, u.requests::text as requests,
           u.period_start, u.late_units::text as late_units, ${sql.unsafe(RECORD_CREDITS)}
    from usage_period_units u join tenants t on t.id = u.tenant_id
    where u.period_start < (select closed_until from usage_close where id)
      and (not ${after} or (u.period_start >= ${cursor.period_start}
           and (u.period_start, u.tenant_id, u.meter) > (${cursor.period_start}::timestamptz, ${cursor.tenant_id}::uuid, ${cursor.meter}::text)))
    order by u.period_start, u.tenant_id, u.meter
    limit ${limit}`
}

/** The receiver acknowledged up to `last`: the cursor moves, retries start over, the lease runs on. */
export async function acknowledgeExport(
  sql: Sql,
  { target, holder, leaseSeconds }: { target: string; holder: string; leaseSeconds: number },
  last: PushRow,
): Promise<boolean> {
  const rows = await sql`
    update usage_export_cursors
    set period_start = ${last.period_start}, tenant_id = ${last.tenant_id}, meter = ${last.meter},
        acknowledged_at = now(), attempts = 0, next_attempt_at = null, last_error = null,
        lease_until = now() + make_interval(secs => ${leaseSeconds})
    where target = ${target} and holder = ${holder}
    returning 1`
  return rows.length === 1
}

/** An attempt failed: the next waits `delayMs`. */
export async function exportFailed(
  sql: Sql,
  { target, holder }: { target: string; holder: string },
  failure: { attempts: number; delayMs: number; error: string },
): Promise<void> {
  await sql`
    update usage_export_cursors
    set attempts = ${failure.attempts}, last_error = ${failure.error.slice(0, 500)},
        next_attempt_at = now() + make_interval(secs => ${failure.delayMs / 1000})
    where target = ${target} and holder = ${holder}`
}

/** A receiver's cursor as it stands, whoever holds the lease (the lag metric reads it). */
export async function exportCursor(sql: Sql, target: string): Promise<ExportCursor> {
  const [row] = await sql<ExportCursor[]>`
    select period_start, tenant_id, meter, attempts, true as due from usage_export_cursors where target = ${target}`
  return row ?? { period_start: null, tenant_id: null, meter: null, attempts: 0, due: true }
}
