// Closed usage periods (docs/billing.md): the replicas' flush marks, the close that follows them,
// and the closed periods' units as export rows. SQL only; the timer is usage/period-close.ts.
import type { Sql, Tx } from './db.js'

/**
 * A replica that has not flushed for this long is not waited for (its late units move on): its
 * mark becomes a loss (usage_replica_losses), unless it stopped and took its mark with it.
 */
export const LIVE_REPLICA_SECONDS = 120

/**
 * The live replicas' flush watermark: every replica seen within `liveReplicaSeconds` has written
 * what it counted before it (usage_flush_marks); null when none is. A fragment of `db`'s statements.
 */
export const liveFlushWatermark = (db: Sql | Tx, liveReplicaSeconds: number) => db`(
    select min(flushed_through) from usage_flush_marks
    where seen_at > now() - make_interval(secs => ${liveReplicaSeconds}))`

/** A replica that stops: the close no longer waits for it (its last flush is in). */
export async function forgetReplica(sql: Sql, replicaId: string): Promise<void> {
  await sql`delete from usage_flush_marks where replica_id = ${replicaId}`
}

/**
 * Closes the periods that end at or before every live replica's mark less `graceSeconds`, and
 * returns where the closed periods end now (null: none closed yet). Never moves back; waits for
 * flushes that hold the close row (store/usage.ts); closes nothing for a replica whose period
 * length is not the closed periods' (its start refuses it: usage/period-close.ts). The marks of
 * replicas no longer live move to usage_replica_losses.
 */
export async function closePeriods(
  sql: Sql,
  {
    periodSeconds,
    graceSeconds,
    liveReplicaSeconds = LIVE_REPLICA_SECONDS,
  }: { periodSeconds: number; graceSeconds: number; liveReplicaSeconds?: number | undefined },
): Promise<Date | null> {
  const [row] = await sql<{ closed_until: Date | null }[]>`
    with watermark as (
      select ${liveFlushWatermark(sql, liveReplicaSeconds)} as at
    ), lost as (
      delete from usage_flush_marks where seen_at <= now() - make_interval(secs => ${liveReplicaSeconds})
      returning replica_id, flushed_through, seen_at
    ), recorded as (
      insert into usage_replica_losses (replica_id, flushed_through, last_seen_at)
      select replica_id, flushed_through, seen_at from lost
      on conflict do nothing
    ), previous as (
      -- The close as this statement found it (a CTE sees no other's writes).
      select closed_until from usage_close where id
    ), target as (
      select to_timestamp(floor(extract(epoch from at - make_interval(secs => ${graceSeconds})) / ${periodSeconds}) * ${periodSeconds}) as until
      from watermark where at is not null
    ), closed as (
      update usage_close set closed_until = target.until, closed_at = now(), period_seconds = ${periodSeconds}
      from target
      where usage_close.id and (usage_close.closed_until is null or usage_close.closed_until < target.until)
        and (usage_close.period_seconds is null or usage_close.period_seconds = ${periodSeconds})
      returning usage_close.closed_until, usage_close.closed_at
    ), frozen as (
      -- The periods this close closes keep their tenant's external_id as it is now (a closed
      -- period never changes): only these, found by the index on period_start.
      update usage_period_units u set closed_at = closed.closed_at, external_id_at_close = t.external_id
      from closed, tenants t
      where u.period_start >= coalesce((select closed_until from previous), '-infinity'::timestamptz)
        and u.period_start < closed.closed_until and t.id = u.tenant_id
    )
    select coalesce((select closed_until from closed), (select closed_until from usage_close where id)) as closed_until`
  return row?.closed_until ?? null
}

/**
 * Whether a replica was lost (killed without flushing) while serving the range's closed periods:
 * from its last flush to when it was last seen, plus the time it was waited for.
 */
export async function replicaLost(
  sql: Sql,
  { from, to, closedUntil }: { from: Date; to: Date; closedUntil: Date | null },
): Promise<boolean> {
  if (closedUntil === null) return false
  const until = closedUntil < to ? closedUntil : to
  if (until <= from) return false
  // The request log writes a few seconds behind the meter: its lost records may be older than the
  // meter's last flush.
  const [row] = await sql<{ lost: boolean }[]>`
    select exists (
      select 1 from usage_replica_losses
      where flushed_through - interval '10 seconds' < ${until}
        and last_seen_at + make_interval(secs => ${LIVE_REPLICA_SECONDS}) > ${from}
    ) as lost`
  return row?.lost ?? false
}

/** The length of the periods closed so far (null: none closed yet). */
export async function closedPeriodSeconds(sql: Sql): Promise<number | null> {
  const [row] = await sql<{ period_seconds: number | null }[]>`select period_seconds from usage_close where id`
  return row?.period_seconds ?? null
}

/** Where the closed periods end (null: none closed yet). */
export async function closedUntil(sql: Sql): Promise<Date | null> {
  const [row] = await sql<{ closed_until: Date | null }[]>`select closed_until from usage_close where id`
  return row?.closed_until ?? null
}

/** One tenant's units of one meter in one closed period: what an export record carries. */
export interface ExportRow {
  account_id: string
  /** Null for the parent's own use. */
  sub_account_id: string | null
  external_id: string | null
  meter: string
  units: string
  requests: string
  period_start: Date
  late_units: string
  /** The units burned from each credit grant of the tenant and meter in the period, by grant id; null: none. */
  credits?: { grant_id: string; units: number }[] | null
}

/**
 * A record's burns (credit_burns, written by the flush that wrote its units): the grants of its
 * tenant and meter, with what the period burned of each, in grant id order.
 */
export const RECORD_CREDITS = `(select jsonb_agg(jsonb_build_object('grant_id', g.id, 'units', b.units) order by g.id)
    from credit_burns b join credit_grants g on g.id = b.grant_id
    where g.sub_account_id = u.tenant_id and g.meter = u.meter and b.period_start = u.period_start and b.units > 0)
  as credits`

/** Where an export page ended: the next page starts after this record. */
type ExportKey = Pick<ExportRow, 'period_start' | 'account_id' | 'sub_account_id' | 'meter'>

/**
 * The units of periods starting in [from, to), of one parent's account (its own use and its
 * sub-accounts') or of every account, page by page of `pageSize`, ordered by period, account,
 * sub-account (the parent's own use first) and meter. Each page is a query of its own, after the
 * last record of the one before: a slow reader holds no connection between pages. The caller
 * cuts `to` at the close. `laterPage` runs each page's statement after the first (the management
 * API's gate: a place each, in the parent's turn).
 */
export async function* exportRows(
  sql: Sql,
  range: { from: Date; to: Date; accountId: string | null },
  pageSize = 500,
  laterPage: <T>(work: () => Promise<T>) => Promise<T> = (work) => work(),
): AsyncGenerator<ExportRow[]> {
  let after: ExportKey | null = null
  for (;;) {
    const read = () => exportPage(sql, range, after, pageSize)
    const page: ExportRow[] = await (after === null ? read() : laterPage(read))
    if (page.length > 0) yield page
    if (page.length < pageSize) return
    after = page[page.length - 1]!
  }
}

function exportPage(
  sql: Sql,
  range: { from: Date; to: Date; accountId: string | null },
  after: ExportKey | null,
  limit: number,
): Promise<ExportRow[]> {
  // The tenant's id is the sub-account's, or the account's for its own use (sub_account_id null).
  // The page starts at its first period by index: the row comparison alone would read the range
  // from `from` again for every page.
  const tenant = after === null ? null : (after.sub_account_id ?? after.account_id)
  return sql<ExportRow[]>`
    select coalesce(t.parent_id, t.id) as account_id,
           case when t.parent_id is null then null else t.id end as sub_account_id,
           -- The external_id at the close (a closed period never changes; migration 028).
           case when u.closed_at is null then t.external_id else u.external_id_at_close end as external_id,
           u.meter, u.units::text as units, u.requests::text as requests,
           u.period_start, u.late_units::text as late_units, ${sql.unsafe(RECORD_CREDITS)}
    from usage_period_units u join tenants t on t.id = u.tenant_id
    where u.period_start >= ${after?.period_start ?? range.from} and u.period_start < ${range.to}
      and (${range.accountId}::uuid is null or t.id = ${range.accountId} or t.parent_id = ${range.accountId})
      and (${after === null} or (u.period_start, coalesce(t.parent_id, t.id), t.parent_id is not null, t.id, u.meter)
           > (${after?.period_start ?? null}::timestamptz, ${after?.account_id ?? null}::uuid,
              ${after?.sub_account_id != null}, ${tenant}::uuid, ${after?.meter ?? null}::text))
    order by u.period_start, coalesce(t.parent_id, t.id), t.parent_id is not null, t.id, u.meter
    limit ${limit}`
}
