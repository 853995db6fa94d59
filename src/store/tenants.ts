// Tenants: parent accounts and their sub-accounts. SQL only; callers pass `sql` or a transaction.
import type { KeyPolicy } from '../guardrails/key-policy.js'
import type { TenantLimits } from '../shared/tenant-limits.js'
import type { Sql, Tx } from './db.js'
import { Statement } from './statement.js'
import type { TenantStatus } from '../shared/tenancy-records.js'

type Db = Sql | Tx

export interface TenantRow {
  id: string
  parent_id: string | null
  name: string
  external_id: string | null
  status: TenantStatus
  metadata: Record<string, string>
  created_at: Date
  updated_at: Date
  deactivated_at: Date | null
  /** null: no limits (docs/api.md, Limits and quotas). */
  limits: TenantLimits | null
  /** A sub-account's key policy; null: none (docs/api.md, Key policies). */
  key_policy: KeyPolicy | null
  /** A sub-account's cell, or a parent account's default cell for its sub-accounts; null: none (docs/api.md, Cells). */
  placement: string | null
  /** A sub-account's plan; null: its parent's default plan, if any (docs/api.md, Plans). */
  plan_id: string | null
  /** A parent account's plan for its sub-accounts without one; null: none. */
  default_plan_id: string | null
}

/** A page row also carries its position, which the caller turns into a cursor (and, sorted by name, its sort value). */
export type TenantPageRow = TenantRow & { seq: string; sort_key?: string }

/** The orders of the sub-accounts list (docs/api.md, Sub-accounts): a `-` is descending. */
export const SUB_ACCOUNT_SORTS = ['created_at', '-created_at', 'name', '-name'] as const
export type SubAccountSort = (typeof SUB_ACCOUNT_SORTS)[number]

/** Thrown when an external_id is already taken among the parent's sub-accounts. */
export class ExternalIdTakenError extends Error {
  constructor() {
    super('external_id already in use')
    this.name = 'ExternalIdTakenError'
  }
}

export const COLUMNS =
  'id, parent_id, name, external_id, status, metadata, created_at, updated_at, deactivated_at, limits, key_policy, ' +
  'placement, plan_id, default_plan_id'

function isUniqueViolation(err: unknown): boolean {
  return (err as { code?: string }).code === '23505'
}

/** Runs a write of tenants, a taken external_id thrown as ExternalIdTakenError. */
export async function rethrowConflict<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run()
  } catch (err) {
    if (isUniqueViolation(err)) throw new ExternalIdTakenError()
    throw err
  }
}

export function createParentAccount(db: Db, input: { name: string; externalId: string | null }): Promise<TenantRow> {
  return rethrowConflict(async () => {
    const [row] = await db<TenantRow[]>`
      insert into tenants (name, external_id) values (${input.name}, ${input.externalId})
      returning ${db.unsafe(COLUMNS)}`
    return row!
  })
}

export interface NewSubAccount {
  name: string
  externalId: string | null
  metadata: Record<string, string>
  /** Stored as given: absent or null for none, else an object with a limit (shared/tenant-limits.ts storedLimits). */
  limits?: TenantLimits | null
  /** Stored as given: absent or null for none (guardrails/key-policy.ts storedKeyPolicy). */
  keyPolicy?: KeyPolicy | null
  /** One of the parent's allowed cells (checked by the caller); absent or null for none. */
  placement?: string | null
  /** Its plan, one of the parent's (checked before: management/plan-checks.ts); absent or null for none. */
  planId?: string | null
}

/** The insert of a sub-account returning its row, a statement or a CTE, its values parameters of `s`. */
export function insertSubAccountSql(db: Db, s: Statement, parentId: string, input: NewSubAccount): string {
  return `insert into tenants (parent_id, name, external_id, metadata, limits, key_policy, plan_id, placement)
    values (${s.param(parentId)}, ${s.param(input.name)}, ${s.param(input.externalId)}, ${s.json(db, input.metadata)},
            ${input.limits == null ? 'null' : s.json(db, input.limits)},
            ${input.keyPolicy == null ? 'null' : s.json(db, input.keyPolicy)},
            ${input.planId == null ? 'null' : `${s.param(input.planId)}::uuid`}, ${s.param(input.placement ?? null)})
    returning ${COLUMNS}`
}

export function createSubAccount(db: Db, parentId: string, input: NewSubAccount): Promise<TenantRow> {
  return rethrowConflict(async () => {
    const s = new Statement()
    const [row] = await s.run<TenantRow[]>(db, insertSubAccountSql(db, s, parentId, input))
    return row!
  })
}

export async function getTenant(db: Db, id: string): Promise<TenantRow | null> {
  const [row] = await db<TenantRow[]>`select ${db.unsafe(COLUMNS)} from tenants where id = ${id}`
  return row ?? null
}

export async function getSubAccount(db: Db, parentId: string, id: string): Promise<TenantRow | null> {
  const [row] = await db<TenantRow[]>`
    select ${db.unsafe(COLUMNS)} from tenants where id = ${id} and parent_id = ${parentId}`
  return row ?? null
}

export async function findSubAccountIdByExternalId(
  db: Db,
  parentId: string,
  externalId: string,
): Promise<string | null> {
  const [row] = await db<{ id: string }[]>`
    select id from tenants where parent_id = ${parentId} and external_id = ${externalId}`
  return row?.id ?? null
}

/** Whether the parent has an active sub-account: `exists` stops at the first, where a count
 * read all of them (20 ms at 100,000 sub-accounts; bench/RESULTS.md at e5da086). */
export async function hasActiveSubAccounts(db: Db, parentId: string): Promise<boolean> {
  const [row] = await db<{ any: boolean }[]>`
    select exists (select 1 from tenants where parent_id = ${parentId} and status = 'active') as any`
  return row!.any
}

export async function countTenants(db: Db): Promise<number> {
  const [row] = await db<{ n: number }[]>`select count(*)::int as n from tenants`
  return row!.n
}

export interface SubAccountPatch {
  name?: string
  /** null clears the external_id. */
  externalId?: string | null
  metadata?: Record<string, string>
  /** Replaces the whole object; null clears it (stored as given, see createSubAccount). */
  limits?: TenantLimits | null
  /** Replaces the whole policy; null clears it (stored as given). */
  keyPolicy?: KeyPolicy | null
  /** One of the parent's allowed cells (checked by the caller); null clears it. */
  placement?: string | null
  /** One of the parent's plans (checked before); null: none, the parent's default then holds. */
  planId?: string | null
}

/** A parent account's scope ceiling, set by the operator (docs/api.md, Key policies); null: any. */
export async function scopeCeiling(db: Db, accountId: string): Promise<string[] | null> {
  const [row] = await db<{ allowed: string[] | null }[]>`
    select to_jsonb(allowed_scopes) as allowed from tenants where id = ${accountId}`
  return row?.allowed ?? null
}

/** What the sub-accounts list adds to each row on request (`include`, docs/api.md, Sub-accounts). */
export interface SubAccountFigures {
  /** Keys neither revoked nor expired. */
  key_count: number
  /** Request units of the current UTC month (forwarded requests at their routes' cost): what a monthly quota counts. */
  usage_this_month: number
}

/**
 * The figures of some sub-accounts of one parent, in one statement: their active keys, and their
 * forwarded requests from `monthStart` (YYYY-MM-DD) to `nextMonthStart` (excluded). An id that is
 * not the parent's sub-account is left out.
 */
export async function subAccountFigures(
  db: Db,
  parentId: string,
  ids: readonly string[],
  month: { first: string; next: string },
): Promise<Map<string, SubAccountFigures>> {
  if (ids.length === 0) return new Map()
  const rows = await db<{ id: string; key_count: number; usage_this_month: string }[]>`
    select t.id,
      (select count(*)::int from api_keys k
        where k.tenant_id = t.id and k.status = 'active' and (k.expires_at is null or k.expires_at > now())
      ) as key_count,
      (select coalesce(sum(u.units), 0)::text from usage_period_units u
        where u.tenant_id = t.id and u.meter = 'requests'
          and u.period_start >= ${month.first}::date::timestamp at time zone 'UTC'
          and u.period_start < ${month.next}::date::timestamp at time zone 'UTC'
      ) as usage_this_month
    from tenants t
    where t.parent_id = ${parentId} and t.id in (select jsonb_array_elements_text(${db.json([...ids])})::uuid)`
  return new Map(
    rows.map((row) => [row.id, { key_count: row.key_count, usage_this_month: Number(row.usage_this_month) }]),
  )
}

/** Sets a parent account's scope ceiling (null: any); false when there is no such parent account. */
/** A parent account's list column that the operator sets from the CLI (events/account-list-changes.ts). */
export type AccountListColumn = 'allowed_scopes' | 'portal_origins'

/** Sets one of a parent account's lists (null: none); false when `accountId` names no parent account. */
export async function setAccountList(
  db: Db,
  accountId: string,
  column: AccountListColumn,
  list: readonly string[] | null,
): Promise<boolean> {
  const value = list === null ? null : db.json([...list])
  const rows = await db`
    update tenants set ${db(column)} = case when ${value}::jsonb is null then null
      else array(select jsonb_array_elements_text(${value}::jsonb)) end, updated_at = now()
    where id = ${accountId} and parent_id is null
    returning id`
  return rows.length === 1
}

/** A parent account's cells (docs/api.md, Cells): those its sub-accounts may be placed in, and its default. */
export interface AccountCells {
  /** null: none set (no sub-account may be placed). */
  allowed: string[] | null
  default: string | null
}

/** The cells of parent account `accountId`; null when it names no parent account. */
export async function accountCells(db: Db, accountId: string): Promise<AccountCells | null> {
  const [row] = await db<{ allowed: string[] | null; placement: string | null }[]>`
    select to_jsonb(allowed_cells) as allowed, placement from tenants where id = ${accountId} and parent_id is null`
  return row === undefined ? null : { allowed: row.allowed, default: row.placement }
}

/** Sets a parent account's cells; false when `accountId` names no parent account. */
export async function setAccountCells(db: Db, accountId: string, cells: AccountCells): Promise<boolean> {
  const allowed = cells.allowed === null ? null : db.json([...cells.allowed])
  const rows = await db`
    update tenants set allowed_cells = case when ${allowed}::jsonb is null then null
      else array(select jsonb_array_elements_text(${allowed}::jsonb)) end,
      placement = ${cells.default}, updated_at = now()
    where id = ${accountId} and parent_id is null
    returning id`
  return rows.length === 1
}
