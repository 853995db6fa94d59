// Prepaid credit grants of sub-accounts (docs/api.md, Credits). SQL only; callers pass `sql` or a
// transaction. A grant's rest is gone once it is voided or expired: `units_left` as the API shows
// it is 0 then, while the row keeps what was left, which billing tells apart from what was burned.
import type { CreditGrants } from '../shared/tenancy-records.js'
import type { Sql, Tx } from './db.js'
import { LIVE_REPLICA_SECONDS, liveFlushWatermark } from './usage-periods.js'

type Db = Sql | Tx

export interface CreditGrantRow {
  id: string
  sub_account_id: string
  account_id: string
  meter: string
  units: number
  /** What use has not burned; its rest is gone when `voided_at` or `expires_at` has passed. */
  units_left: number
  priority: number
  expires_at: Date | null
  voided_at: Date | null
  created_at: Date
  metadata: Record<string, string>
  /** Whether the grant still counts: not voided and not expired, by the database's clock. */
  live: boolean
}

// bigint columns cross as numbers: units stay below 2^53 (at most 10^12 a grant).
const COLUMNS = `id, sub_account_id, account_id, meter, units::float8 as units, units_left::float8 as units_left,
  priority, expires_at, voided_at, created_at, metadata,
  (voided_at is null and (expires_at is null or expires_at > now())) as live`

export interface NewCreditGrant {
  id: string
  subAccountId: string
  accountId: string
  meter: string
  units: number
  priority: number
  expiresAt: Date | null
  metadata: Record<string, string>
}

/**
 * Makes a grant (in the caller's transaction): it first pays what the sub-account owes in that
 * meter (units used beyond every grant), so it starts with that much burned.
 */
export async function insertCreditGrant(db: Tx, grant: NewCreditGrant): Promise<CreditGrantRow> {
  const [owed] = await db<{ units: number }[]>`
    select units::float8 as units from credit_debts
    where sub_account_id = ${grant.subAccountId} and meter = ${grant.meter} for update`
  const paid = Math.min(owed?.units ?? 0, grant.units)
  if (paid > 0)
    await db`update credit_debts set units = units - ${paid}
             where sub_account_id = ${grant.subAccountId} and meter = ${grant.meter}`
  const [row] = await db<CreditGrantRow[]>`
    insert into credit_grants (id, sub_account_id, account_id, meter, units, units_left, priority, expires_at,
                               metadata, debt_paid)
    values (${grant.id}, ${grant.subAccountId}, ${grant.accountId}, ${grant.meter}, ${grant.units},
            ${grant.units - paid}, ${grant.priority}, ${grant.expiresAt}, ${db.json(grant.metadata)}, ${paid})
    returning ${db.unsafe(COLUMNS)}`
  return row!
}

/** What the sub-account owes in each meter (units used beyond every grant), by meter; none: absent. */
export async function readCreditDebts(db: Db, subAccountId: string): Promise<Map<string, number>> {
  const rows = await db<{ meter: string; units: number }[]>`
    select meter, units::float8 as units from credit_debts where sub_account_id = ${subAccountId} and units > 0`
  return new Map(rows.map((row) => [row.meter, row.units]))
}

/**
 * A sub-account's grants: the live ones first, in the order use burns them (priority, soonest
 * expiry, oldest), then the others (voided, expired), newest first.
 */
export function listCreditGrants(db: Db, accountId: string, subAccountId: string): Promise<CreditGrantRow[]> {
  return db<CreditGrantRow[]>`
    select * from (
      select ${db.unsafe(COLUMNS)}, seq from credit_grants
      where account_id = ${accountId} and sub_account_id = ${subAccountId}
    ) as grants
    order by live desc, case when live then priority end, case when live then expires_at end nulls last,
             case when live then seq end, created_at desc, seq desc`
}

/** One grant of the sub-account, or null; `forUpdate` locks it until the transaction ends. */
export async function getCreditGrant(
  db: Db,
  accountId: string,
  subAccountId: string,
  id: string,
  { forUpdate = false } = {},
): Promise<CreditGrantRow | null> {
  const [row] = await db<CreditGrantRow[]>`
    select ${db.unsafe(COLUMNS)} from credit_grants
    where id = ${id} and account_id = ${accountId} and sub_account_id = ${subAccountId}
    ${forUpdate ? db`for update` : db``}`
  return row ?? null
}

/**
 * Voids a grant neither voided nor expired yet: its rest is gone from now on. Null when it was
 * voided already, or has expired: its rest went then, and is its credits.expired's to tell
 * (expiredUnmarked reads only grants never voided).
 */
export async function voidCreditGrant(db: Db, id: string): Promise<CreditGrantRow | null> {
  const [row] = await db<CreditGrantRow[]>`
    update credit_grants set voided_at = now()
    where id = ${id} and voided_at is null and (expires_at is null or expires_at > now())
    returning ${db.unsafe(COLUMNS)}`
  return row ?? null
}

/**
 * A grant as the tenant's lookup reads it (`GRANTS_OF_TENANT`): its meter, whether it counts, its
 * units, what is left of them, and its expiry (ms; null: never).
 */
export type GrantTuple = [meter: string, live: boolean, units: number, left: number, expiresAt: number | null]

/**
 * What the limiter needs of a sub-account's grants, as a column of the statement that reads the
 * tenant (`tenants`, store/tenancy-lookups.ts), so that a lookup is one statement whether it has
 * credits or not: of every meter it has grants of, since the credits in force are its own and its
 * plan's, meter by meter (shared/plan-limits.ts), and the plan is not known there; null for a
 * parent account.
 */
export const GRANTS_OF_TENANT = `case when tenants.parent_id is null then null else coalesce((
    select json_agg(json_build_array(g.meter, g.voided_at is null and (g.expires_at is null or g.expires_at > now()),
                                     g.units::float8, g.units_left::float8, floor(extract(epoch from g.expires_at) * 1000)))
    from credit_grants g
    where g.sub_account_id = tenants.id), '[]') end as credit_grants`

/**
 * The grants `GRANTS_OF_TENANT` read, by meter: for each, what the grants that no longer count gave
 * (the units burned from them), and the live ones with their expiry; each meter `named` has one.
 */
export function creditGrantsOf(grants: readonly GrantTuple[], named: readonly string[]): Record<string, CreditGrants> {
  // A meter's name is data: no prototype for it to meet.
  const found: Record<string, { settled: number; live: CreditGrants['live'][number][] }> = Object.create(null)
  for (const meter of named) found[meter] = { settled: 0, live: [] }
  for (const [meter, live, units, left, expiresAt] of grants) {
    found[meter] ??= { settled: 0, live: [] }
    const meterGrants = found[meter]!
    if (live) meterGrants.live.push({ units, left, expiresAt })
    else meterGrants.settled += units - left
  }
  return found
}

/** The credits' use of a meter: every unit burned from the sub-account's grants, and its debt. */
export async function readCreditUse(db: Db, subAccountId: string, meter: string): Promise<number> {
  const [row] = await db<{ used: number }[]>`
    select coalesce((select sum(units - units_left) from credit_grants
                     where sub_account_id = ${subAccountId} and meter = ${meter}), 0)::float8
         + coalesce((select units from credit_debts
                      where sub_account_id = ${subAccountId} and meter = ${meter}), 0)::float8 as used`
  return row!.used
}

/**
 * A meter's credits as Postgres has them: the balance (units left of the live grants, less the
 * debt), the units its live grants gave, and the newest grant's sequence (a new grant re-arms the
 * alerts of the meter: alerts/credit-alerts.ts).
 */
export async function readCreditState(
  db: Db,
  subAccountId: string,
  meter: string,
): Promise<{ balance: number; granted: number; newest: string }> {
  const [row] = await db<{ balance: number; granted: number; newest: string | null }[]>`
    select coalesce(sum(units_left) filter (where live), 0)::float8
             - coalesce((select units from credit_debts where sub_account_id = ${subAccountId} and meter = ${meter}), 0)::float8
             as balance,
           coalesce(sum(units) filter (where live), 0)::float8 as granted,
           max(seq)::text as newest
    from (select units, units_left, seq, voided_at is null and (expires_at is null or expires_at > now()) as live
          from credit_grants where sub_account_id = ${subAccountId} and meter = ${meter}) as grants`
  return { balance: row!.balance, granted: row!.granted, newest: row!.newest ?? '0' }
}

/**
 * Grants that expired within the last 30 days and have no credits.expired yet (alert_marks), oldest
 * first, once every live replica has flushed past the expiry (usage_flush_marks, as the period
 * close reads them): a count made before it may still burn the grant (addUsage's `since`), and
 * what is left is final only then.
 */
export function expiredUnmarked(db: Db, limit: number): Promise<CreditGrantRow[]> {
  return db<CreditGrantRow[]>`
    select ${db.unsafe(COLUMNS)} from credit_grants g
    where voided_at is null and expires_at <= now() and expires_at > now() - interval '30 days'
      and expires_at <= coalesce(${liveFlushWatermark(db, LIVE_REPLICA_SECONDS)}, now())
      and not exists (select 1 from alert_marks m where m.kind = 'credits.expired' and m.subject = g.id::text)
    order by expires_at limit ${limit}`
}

/** A sub-account's credits of a meter over all their grants (usage reconciliation). */
export interface CreditLedgerRow {
  sub_account_id: string
  meter: string
  granted: number
  left: number
  /** Left in grants when they expired or were voided. */
  expired: number
  debt_paid: number
  /** The burn log's sum (credit_burns): what the export carries. */
  burned: number
}

/**
 * Every credit ledger of the parent's sub-accounts, in (sub-account, meter) order. Async, so that a
 * statement refused at once (its heavy read stopped, call-statements.ts) rejects rather than throws
 * while the reconciliation's other reads are already under way, which would leave theirs unheard.
 */
export async function creditLedgers(db: Db, accountId: string): Promise<CreditLedgerRow[]> {
  return db<CreditLedgerRow[]>`
    select g.sub_account_id, g.meter, sum(g.units)::float8 as granted,
           coalesce(sum(g.units_left) filter (where g.voided_at is null and (g.expires_at is null or g.expires_at > now())), 0)::float8 as left,
           coalesce(sum(g.units_left) filter (where g.voided_at is not null or g.expires_at <= now()), 0)::float8 as expired,
           sum(g.debt_paid)::float8 as debt_paid,
           coalesce(sum((select sum(b.units) from credit_burns b where b.grant_id = g.id)), 0)::float8 as burned
    from credit_grants g where g.account_id = ${accountId}
    group by g.sub_account_id, g.meter order by g.sub_account_id, g.meter`
}
