// Plans of parent accounts (docs/api.md, Plans): reads, and the SQL of their changes (the changes
// with their events are management/plan-changes.ts). SQL only; callers pass `sql` or a transaction.
import type { KeyPolicy } from '../guardrails/key-policy.js'
import type { TenantLimits } from '../shared/tenant-limits.js'
import type { Sql, Tx } from './db.js'

type Db = Sql | Tx

export interface PlanRow {
  id: string
  account_id: string
  name: string
  /** null: none of any kind (the stored form, shared/tenant-limits.ts storedLimits). */
  limits: TenantLimits | null
  /** null: none (guardrails/key-policy.ts storedKeyPolicy). */
  key_policy: KeyPolicy | null
  metadata: Record<string, string>
  created_at: Date
  updated_at: Date
}

export type PlanPageRow = PlanRow & { seq: string }

/**
 * SQL: a column of the plan in force for the sub-account row `alias` (docs/api.md, Plans): its own
 * plan, else its parent's default; null when it has none. `planInForceOf` reads the whole row.
 */
export const planInForceSql = (alias: string, column: 'limits' | 'key_policy') => `(select p.${column} from plans p
    where p.id = coalesce(${alias}.plan_id, (select d.default_plan_id from tenants d where d.id = ${alias}.parent_id)))`

export const PLAN_COLUMNS = 'id, account_id, name, limits, key_policy, metadata, created_at, updated_at'

/** The plan with this id, whoever's: what the tenancy lookups read (a tenant names only its parent's). */
export async function getPlanById(db: Db, id: string): Promise<PlanRow | null> {
  const [row] = await db<PlanRow[]>`select ${db.unsafe(PLAN_COLUMNS)} from plans where id = ${id}`
  return row ?? null
}

/** The account's plan with this id; null when there is none (unknown, or another account's). */
export async function getPlan(db: Db, accountId: string, id: string): Promise<PlanRow | null> {
  const [row] = await db<PlanRow[]>`
    select ${db.unsafe(PLAN_COLUMNS)} from plans where id = ${id} and account_id = ${accountId}`
  return row ?? null
}

/** A page of the account's plans, oldest first, after the position `afterSeq`. */
export function listPlans(
  db: Db,
  accountId: string,
  page: { limit: number; afterSeq: string | null },
): Promise<PlanPageRow[]> {
  return db<PlanPageRow[]>`
    select ${db.unsafe(PLAN_COLUMNS)}, seq::text as seq from plans
    where account_id = ${accountId} ${page.afterSeq === null ? db`` : db`and seq > ${page.afterSeq}`}
    order by seq
    limit ${page.limit}`
}

/**
 * The plans that decide the effective limits of some of an account's sub-accounts, in one
 * statement: each of `ids` that is the account's, and its default plan (`default_plan_id`, null
 * when it has none).
 */
export async function plansInForce(
  db: Db,
  accountId: string,
  ids: readonly string[],
): Promise<{ plans: Map<string, PlanRow>; defaultPlanId: string | null }> {
  const rows = await db<(PlanRow & { default_plan_id: string | null })[]>`
    select d.default_plan_id, p.* from (select default_plan_id from tenants where id = ${accountId}) d
    left join lateral (
      select ${db.unsafe(PLAN_COLUMNS)} from plans
      where account_id = ${accountId}
        and (id = d.default_plan_id or id in (select jsonb_array_elements_text(${db.json([...ids])})::uuid))
    ) p on true`
  const plans = new Map<string, PlanRow>()
  for (const { default_plan_id: _, ...row } of rows) if (row.id !== null) plans.set(row.id, row)
  return { plans, defaultPlanId: rows[0]?.default_plan_id ?? null }
}

/** Whether `id` names one of the account's plans. */
export async function isOwnPlan(db: Db, accountId: string, id: string): Promise<boolean> {
  const [row] = await db<{ own: boolean }[]>`
    select exists (select 1 from plans where id = ${id} and account_id = ${accountId}) as own`
  return row!.own
}

/** Whether a plan is in use: a sub-account's plan, or an account's default (a delete is then refused). */
export const PLAN_IN_USE_SQL = (planAlias: string) =>
  `exists (select 1 from tenants where plan_id = ${planAlias}.id) or exists (select 1 from tenants where default_plan_id = ${planAlias}.id)`

/** The plan in force for a sub-account: its own plan, else its parent's default; null: none. */
export async function planInForceOf(
  db: Db,
  subAccount: { plan_id: string | null; parent_id: string | null },
): Promise<PlanRow | null> {
  if (subAccount.parent_id === null) return null
  const [row] = await db<PlanRow[]>`
    select ${db.unsafe(PLAN_COLUMNS)} from plans
    where id = coalesce(${subAccount.plan_id}::uuid,
      (select default_plan_id from tenants where id = ${subAccount.parent_id}))`
  return row ?? null
}
