// Changes of plans with their events (docs/events.md): each change and its event in one statement,
// as the sub-accounts' are (sub-account-changes.ts). A change of a plan is this one row, whatever
// the number of its sub-accounts: they name the plan, and read its limits through it.
import { NO_KEY_POLICY, NO_LIMITS, planObject } from '../events/present-sql.js'
import { type Origin, runChange, statementEvent } from '../events/record.js'
import { ApiError } from '../errors.js'
import type { KeyPolicy } from '../guardrails/key-policy.js'
import type { Sql, Tx } from '../store/db.js'
import { changedOrBefore, changeWithEvent } from '../store/events.js'
import { PLAN_COLUMNS, PLAN_IN_USE_SQL, type PlanRow } from '../store/plans.js'
import { Statement } from '../store/statement.js'
import type { TenantLimits } from '../shared/tenant-limits.js'

type Db = Sql | Tx

/** A plan's fields as kept: limits and policy in their stored forms (null: none). */
export interface PlanInput {
  name: string
  limits: TenantLimits | null
  keyPolicy: KeyPolicy | null
  metadata: Record<string, string>
}

export function createPlanWithEvent(sql: Sql, origin: Origin, accountId: string, input: PlanInput): Promise<PlanRow> {
  const create = async (db: Db) => {
    const s = new Statement()
    const json = (value: object | null) => (value === null ? 'null::jsonb' : `${s.json(db, value)}::jsonb`)
    const [row] = await changeWithEvent<PlanRow[]>(
      db,
      s,
      `changed as (
        insert into plans (account_id, name, limits, key_policy, metadata)
        values (${s.param(accountId)}, ${s.param(input.name)}, ${json(input.limits)}, ${json(input.keyPolicy)},
                ${json(input.metadata)})
        returning ${PLAN_COLUMNS}
      )`,
      statementEvent(origin, {
        accountId,
        type: 'plan.created',
        target: { type: 'plan', id: 'changed.id' },
        object: planObject('changed'),
        previous: 'null::jsonb',
        source: 'changed',
      }),
      'select * from changed',
    )
    return row!
  }
  return runChange(sql, origin, create, (row) => ({ type: 'plan', id: row.id }))
}

/** The plan's row locked, as the CTE `before` (none: unknown, or another account's). */
const lockedBefore = (s: Statement, accountId: string, id: string) => `before as (
    select ${PLAN_COLUMNS} from plans where id = ${s.param(id)} and account_id = ${s.param(accountId)} for update
  )`

/**
 * The patch applied, with whether it changed anything (a change to what is there writes neither the
 * row nor an event); null for an unknown plan (or another account's).
 */
export function updatePlanWithEvent(
  sql: Sql,
  origin: Origin,
  accountId: string,
  id: string,
  patch: Partial<PlanInput>,
): Promise<{ row: PlanRow; changed: boolean } | null> {
  const update = async (db: Db) => {
    const s = new Statement()
    // Each field: its new value, and how a value of it is shown (no limits at all and limits of
    // null members are one value), which is what is compared.
    const fields: { name: string; value: string; shown: (value: string) => string }[] = []
    const json = (value: object | null) => (value === null ? 'null::jsonb' : `${s.json(db, value)}::jsonb`)
    const asIs = (value: string) => value
    if (patch.name !== undefined) fields.push({ name: 'name', value: `${s.param(patch.name)}::text`, shown: asIs })
    if (patch.limits !== undefined)
      fields.push({ name: 'limits', value: json(patch.limits), shown: (v) => `coalesce(${v}, ${NO_LIMITS})` })
    if (patch.keyPolicy !== undefined)
      fields.push({
        name: 'key_policy',
        value: json(patch.keyPolicy),
        shown: (v) => `coalesce(${v}, ${NO_KEY_POLICY})`,
      })
    if (patch.metadata !== undefined) fields.push({ name: 'metadata', value: json(patch.metadata), shown: asIs })
    // The API's schema asks for one field at least (minProperties).
    if (fields.length === 0) throw new Error('a PATCH of a plan sets one field at least')
    const before = (f: (typeof fields)[number]) => f.shown(`before.${f.name}`)
    const differs = (f: (typeof fields)[number]) => `${before(f)} is distinct from ${f.shown(f.value)}`
    const previous = fields
      .map((f) => `case when ${differs(f)} then jsonb_build_object('${f.name}', ${before(f)}) else '{}'::jsonb end`)
      .join(' || ')
    const [result] = await changeWithEvent<(PlanRow & { changed: boolean })[]>(
      db,
      s,
      `${lockedBefore(s, accountId, id)},
      changed as (
        update plans set ${fields.map((f) => `${f.name} = ${f.value}`).join(', ')}, updated_at = now()
        where id = (select id from before where ${fields.map(differs).join(' or ')})
        returning ${PLAN_COLUMNS}
      )`,
      statementEvent(origin, {
        accountId,
        type: 'plan.updated',
        target: { type: 'plan', id: 'changed.id' },
        object: planObject('changed'),
        previous,
        source: 'changed, before',
      }),
      changedOrBefore(),
    )
    if (result === undefined) return null
    const { changed, ...row } = result
    return { row, changed }
  }
  return runChange(sql, origin, update, (result) =>
    result?.changed === true ? { type: 'plan', id: result.row.id } : null,
  )
}

const planInUse = () =>
  new ApiError(
    'plan_in_use',
    'the plan is in use: give its sub-accounts another plan_id (or null), and unset it as default_plan_id in PATCH /v1/sub-accounts/settings, then delete it',
  )

/**
 * Deletes the account's plan, with `plan.deleted` (its object the plan as it was); false for an
 * unknown plan (or another account's). A plan that a sub-account or the account's default names:
 * `409 plan_in_use`, nothing changed.
 */
export async function deletePlanWithEvent(sql: Sql, origin: Origin, accountId: string, id: string): Promise<boolean> {
  const remove = async (db: Db) => {
    const s = new Statement()
    const [result] = await changeWithEvent<(PlanRow & { changed: boolean })[]>(
      db,
      s,
      `${lockedBefore(s, accountId, id)},
      changed as (
        delete from plans where id = (select id from before where not (${PLAN_IN_USE_SQL('before')}))
        returning ${PLAN_COLUMNS}
      )`,
      statementEvent(origin, {
        accountId,
        type: 'plan.deleted',
        target: { type: 'plan', id: 'changed.id' },
        object: planObject('changed'),
        previous: 'null::jsonb',
        source: 'changed',
      }),
      changedOrBefore(),
    )
    return result
  }
  let result: Awaited<ReturnType<typeof remove>>
  try {
    result = await runChange(sql, origin, remove, (deleted) =>
      deleted?.changed === true ? { type: 'plan', id } : null,
    )
  } catch (err) {
    // A sub-account given the plan between the check and the delete: the foreign key refuses it.
    if ((err as { code?: string }).code === '23503') throw planInUse()
    throw err
  }
  if (result === undefined) return false
  if (!result.changed) throw planInUse()
  return true
}
