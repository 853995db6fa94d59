// Granting and voiding prepaid credits with their events (docs/api.md, Credits; docs/events.md):
// each change and its event commit together or not at all.
import { randomUUID } from 'node:crypto'
import { type Origin, markClaim, recordEvent } from '../events/record.js'
import type { Sql } from '../store/db.js'
import {
  type CreditGrantRow,
  getCreditGrant,
  insertCreditGrant,
  type NewCreditGrant,
  voidCreditGrant,
} from '../store/credit-grants.js'
import { planInForceOf } from '../store/plans.js'
import type { TenantRow } from '../store/tenants.js'
import { inTransaction } from '../store/transaction.js'
import { effectiveLimits } from '../shared/plan-limits.js'
import { presentCreditGrant } from '../schemas/present.js'

/**
 * A sub-account's balance of each meter: the units left of its live grants less what it owes (used
 * beyond them, so below zero then), for every meter that has a grant or is named by `creditMeters`
 * (its credit limits), in name order.
 */
export function creditBalances(
  rows: readonly CreditGrantRow[],
  creditMeters: readonly string[],
  debts: ReadonlyMap<string, number>,
): { meter: string; units_left: number }[] {
  const left = new Map<string, number>(creditMeters.map((meter) => [meter, 0]))
  for (const [meter, owed] of debts) left.set(meter, -owed)
  for (const row of rows) left.set(row.meter, (left.get(row.meter) ?? 0) + (row.live ? row.units_left : 0))
  return [...left.keys()].sort().map((meter) => ({ meter, units_left: left.get(meter)! }))
}

/** The meters of the sub-account's credit limits in force: its own, else its plan's (docs/api.md, Plans). */
export async function creditMetersInForce(sql: Sql, sub: TenantRow): Promise<string[]> {
  const plan = await planInForceOf(sql, sub)
  return Object.keys(effectiveLimits(sub.limits, plan?.limits)?.credits ?? {})
}

/** What an event about a grant shows: the grant, and the sub-account it belongs to. */
const eventObject = (row: CreditGrantRow) => ({ ...presentCreditGrant(row), sub_account_id: row.sub_account_id })

/** Makes a grant and writes `credits.granted` with it. */
export function grantCreditsWithEvent(
  sql: Sql,
  origin: Origin,
  grant: Omit<NewCreditGrant, 'id'>,
): Promise<CreditGrantRow> {
  return inTransaction(sql, async (tx) => {
    const row = await insertCreditGrant(tx, { id: randomUUID(), ...grant })
    await recordEvent(tx, origin, {
      accountId: grant.accountId,
      type: 'credits.granted',
      target: { type: 'credit_grant', id: row.id },
      object: eventObject(row),
      previous: null,
    })
    return row
  })
}

/**
 * Voids the sub-account's grant and writes `credits.voided`; a grant voided already is answered as
 * it is, and writes nothing (a repeat changes nothing). Null when there is no such grant.
 */
export function voidCreditsWithEvent(
  sql: Sql,
  origin: Origin,
  accountId: string,
  subAccountId: string,
  id: string,
): Promise<CreditGrantRow | null> {
  return inTransaction(sql, async (tx) => {
    const before = await getCreditGrant(tx, accountId, subAccountId, id, { forUpdate: true })
    if (before === null) return null
    const after = await voidCreditGrant(tx, id)
    if (after === null) {
      await markClaim(tx, origin, { type: 'credit_grant', id })
      return before
    }
    const shown = presentCreditGrant(before)
    await recordEvent(tx, origin, {
      accountId,
      type: 'credits.voided',
      target: { type: 'credit_grant', id },
      object: eventObject(after),
      previous: { units_left: shown.units_left, voided_at: shown.voided_at },
    })
    return after
  })
}
