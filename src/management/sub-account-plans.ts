// Sub-accounts and their plans (docs/api.md, Plans): a body's plan id checked to be the parent's
// own, and sub-accounts shown with the plan in force, which their effective limits fall back on.
import { validationFailed } from '../errors.js'
import { presentSubAccount } from '../schemas/present.js'
import type { SubAccount } from '../schemas/sub-accounts.js'
import type { Sql } from '../store/db.js'
import { isOwnPlan, plansInForce } from '../store/plans.js'
import type { TenantRow } from '../store/tenants.js'

/**
 * `planId` when it names one of the parent's plans (or is null or absent); else a 400 naming the
 * field at `path`. A plan cannot change hands and one in use cannot be deleted (a foreign key), so
 * a plan found here is still the parent's when the write that names it commits.
 */
export async function checkOwnPlan(
  sql: Sql,
  parentId: string,
  planId: string | null | undefined,
  path: string,
): Promise<void> {
  if (planId == null || (await isOwnPlan(sql, parentId, planId.toLowerCase()))) return
  throw validationFailed([
    { path, message: 'is not one of your plans: give the id of a plan from GET /v1/sub-accounts/plans, or null' },
  ])
}

/**
 * Runs a write that names a plan checked by checkOwnPlan: a plan deleted since (it was in use by
 * nothing then) fails the write's foreign key, answered as the check would have (400 at `path`).
 */
export async function withPlanStillThere<T>(path: string, write: () => Promise<T>): Promise<T> {
  try {
    return await write()
  } catch (err) {
    if ((err as { code?: string }).code === '23503' && /plan_id/.test((err as { message?: string }).message ?? ''))
      throw validationFailed([
        { path, message: 'names a plan deleted since: give the id of one of your plans, or null' },
      ])
    throw err
  }
}

/**
 * Sub-accounts of one parent as the API shows them, each with the plan in force (its own, else
 * the parent's default), read in one statement; `present` wraps the rows in another form when needed.
 */
export async function presentSubAccounts(
  sql: Sql,
  parentId: string,
  rows: readonly TenantRow[],
): Promise<SubAccount[]> {
  const planOf = await planFinder(sql, parentId, rows)
  return rows.map((row) => presentSubAccount(row, planOf(row)))
}

/** One sub-account as the API shows it. */
export async function presentOne(sql: Sql, parentId: string, row: TenantRow): Promise<SubAccount> {
  return (await presentSubAccounts(sql, parentId, [row]))[0]!
}

/** The plan in force for each of `rows`, read once. */
export async function planFinder(sql: Sql, parentId: string, rows: readonly TenantRow[]) {
  const ids = [...new Set(rows.flatMap((row) => (row.plan_id === null ? [] : [row.plan_id])))]
  const { plans, defaultPlanId } = await plansInForce(sql, parentId, ids)
  return (row: TenantRow) => plans.get(row.plan_id ?? defaultPlanId ?? '') ?? null
}
