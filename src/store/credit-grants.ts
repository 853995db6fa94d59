// Prepaid credit grants of sub-accounts (docs/api.md, Credits). SQL only; callers pass `sql` or a
// transaction. A grant's rest is gone once it is voided or expired: `units_left` as the API shows
// it is 0 then, while the row keeps what was left, which billing tells apart from what was burned.
import type { Sql, Tx } from './db.js'

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

export async function insertCreditGrant(db: Db, grant: NewCreditGrant): Promise<CreditGrantRow> {
  const [row] = await db<CreditGrantRow[]>`
    insert into credit_grants (id, sub_account_id, account_id, meter, units, units_left, priority, expires_at, metadata)
    values (${grant.id}, ${grant.subAccountId}, ${grant.accountId}, ${grant.meter}, ${grant.units}, ${grant.units},
            ${grant.priority}, ${grant.expiresAt}, ${db.json(grant.metadata)})
    returning ${db.unsafe(COLUMNS)}`
  return row!
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

/** Voids a grant not voided yet: its rest is gone from now on. Null when it was voided already. */
export async function voidCreditGrant(db: Db, id: string): Promise<CreditGrantRow | null> {
  const [row] = await db<CreditGrantRow[]>`
    update credit_grants set voided_at = now() where id = ${id} and voided_at is null
    returning ${db.unsafe(COLUMNS)}`
  return row ?? null
}
