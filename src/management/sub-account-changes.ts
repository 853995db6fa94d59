// Changes of sub-accounts with their events (docs/events.md): each change writes its event in
// its own statement, so that both commit together or not at all in one round trip. A PATCH or a
// status change locks the row first and compares in SQL, so that a change that changes nothing (a
// repeated deactivate, a PATCH with the values already there) writes neither the row nor an event.
import { isoSql, NO_KEY_POLICY, NO_LIMITS, subAccountObject } from '../events/present-sql.js'
import { type Origin, runChange, statementEvent } from '../events/record.js'
import type { Sql, Tx } from '../store/db.js'
import { changedOrBefore, changeWithEvent } from '../store/events.js'
import { Statement } from '../store/statement.js'
import {
  COLUMNS,
  insertSubAccountSql,
  type NewSubAccount,
  rethrowConflict,
  type SubAccountPatch,
  type TenantRow,
} from '../store/tenants.js'
import type { TenantStatus } from '../shared/tenancy-records.js'
import { storedLimits } from '../shared/tenant-limits.js'

type Db = Sql | Tx

/** The sub-account's row locked, as the CTE `before` (none: unknown, or another parent's). */
const lockedBefore = (s: Statement, parentId: string, id: string) => `before as (
    select ${COLUMNS} from tenants where id = ${s.param(id)} and parent_id = ${s.param(parentId)} for update
  )`

const SUB_ACCOUNT_CHANGED = subAccountObject('changed')

export function createSubAccountWithEvent(
  sql: Sql,
  origin: Origin,
  parentId: string,
  input: NewSubAccount,
): Promise<TenantRow> {
  const create = (db: Db) =>
    rethrowConflict(async () => {
      const s = new Statement()
      const [row] = await changeWithEvent<TenantRow[]>(
        db,
        s,
        `changed as (${insertSubAccountSql(db, s, parentId, input)})`,
        statementEvent(origin, {
          accountId: parentId,
          type: 'sub_account.created',
          target: { type: 'sub_account', id: 'changed.id' },
          object: SUB_ACCOUNT_CHANGED,
          previous: 'null::jsonb',
          source: 'changed',
        }),
        'select * from changed',
      )
      return row!
    })
  return runChange(sql, origin, create, (row) => ({ type: 'sub_account', id: row.id }))
}

export interface SubAccountUpdate {
  /** The row after the patch; as it was when nothing changed. */
  row: TenantRow
  /** Whether the patch changed anything (and wrote an event). */
  changed: boolean
  /** The external_id before the patch: the caches of both go stale when it moved. */
  previousExternalId: string | null
}

/** One field of a PATCH: how it is set, and how the row before is told apart from it and shown. */
interface PatchedField {
  name: string
  set: string
  /** True when the row before differs from what the patch sets. */
  differs: string
  /** The field before, as the API shows it. */
  shownBefore: string
}

function patchedFields(db: Db, s: Statement, patch: SubAccountPatch): PatchedField[] {
  const fields: PatchedField[] = []
  if (patch.name !== undefined) {
    const name = s.param(patch.name)
    fields.push({
      name: 'name',
      set: `name = ${name}`,
      differs: `before.name is distinct from ${name}::text`,
      shownBefore: 'before.name',
    })
  }
  if (patch.externalId !== undefined) {
    const externalId = s.param(patch.externalId)
    fields.push({
      name: 'external_id',
      set: `external_id = ${externalId}`,
      differs: `before.external_id is distinct from ${externalId}::text`,
      shownBefore: 'before.external_id',
    })
  }
  if (patch.metadata !== undefined) {
    const metadata = `${s.json(db, patch.metadata)}::jsonb`
    fields.push({
      name: 'metadata',
      set: `metadata = ${metadata}`,
      differs: `before.metadata is distinct from ${metadata}`,
      shownBefore: 'before.metadata',
    })
  }
  if (patch.limits !== undefined) {
    const stored = storedLimits(patch.limits)
    const limits = stored === null ? 'null::jsonb' : `${s.json(db, stored)}::jsonb`
    // Compared as shown, where no limits at all and limits of null members are one value.
    fields.push({
      name: 'limits',
      set: `limits = ${limits}`,
      differs: `coalesce(before.limits, ${NO_LIMITS}) is distinct from coalesce(${limits}, ${NO_LIMITS})`,
      shownBefore: `coalesce(before.limits, ${NO_LIMITS})`,
    })
  }
  if (patch.keyPolicy !== undefined) {
    const policy = patch.keyPolicy === null ? 'null::jsonb' : `${s.json(db, patch.keyPolicy)}::jsonb`
    fields.push({
      name: 'key_policy',
      set: `key_policy = ${policy}`,
      differs: `coalesce(before.key_policy, ${NO_KEY_POLICY}) is distinct from coalesce(${policy}, ${NO_KEY_POLICY})`,
      shownBefore: `coalesce(before.key_policy, ${NO_KEY_POLICY})`,
    })
  }
  if (patch.placement !== undefined) {
    const placement = s.param(patch.placement)
    fields.push({
      name: 'placement',
      set: `placement = ${placement}`,
      differs: `before.placement is distinct from ${placement}::text`,
      shownBefore: 'before.placement',
    })
  }
  if (patch.planId !== undefined) {
    const planId = patch.planId === null ? 'null::uuid' : `${s.param(patch.planId)}::uuid`
    fields.push({
      name: 'plan_id',
      set: `plan_id = ${planId}`,
      differs: `before.plan_id is distinct from ${planId}`,
      shownBefore: 'before.plan_id',
    })
  }
  return fields
}

/** The patch applied, or null for an unknown sub-account (or another parent's). */
export function updateSubAccountWithEvent(
  sql: Sql,
  origin: Origin,
  parentId: string,
  id: string,
  patch: SubAccountPatch,
): Promise<SubAccountUpdate | null> {
  const update = async (db: Db): Promise<SubAccountUpdate | null> => {
    const s = new Statement()
    const fields = patchedFields(db, s, patch)
    // The API's schema asks for one field at least (minProperties).
    if (fields.length === 0) throw new Error('a PATCH of a sub-account sets one field at least')
    // The fields that changed, each shown as it was: `previous` holds those only.
    const previous = fields
      .map((f) => `case when ${f.differs} then jsonb_build_object('${f.name}', ${f.shownBefore}) else '{}'::jsonb end`)
      .join(' || ')
    const [result] = await rethrowConflict(() =>
      changeWithEvent<(TenantRow & { changed: boolean; previous_external_id: string | null })[]>(
        db,
        s,
        `${lockedBefore(s, parentId, id)},
        changed as (
          update tenants set ${fields.map((f) => f.set).join(', ')}, updated_at = now()
          where id = (select id from before where ${fields.map((f) => f.differs).join(' or ')})
          returning ${COLUMNS}
        )`,
        statementEvent(origin, {
          accountId: parentId,
          type: 'sub_account.updated',
          target: { type: 'sub_account', id: 'changed.id' },
          object: SUB_ACCOUNT_CHANGED,
          previous,
          source: 'changed, before',
        }),
        changedOrBefore(', before.external_id as previous_external_id'),
      ),
    )
    if (result === undefined) return null
    const { changed, previous_external_id: previousExternalId, ...row } = result
    return { row, changed, previousExternalId }
  }
  return runChange(sql, origin, update, (result) =>
    result?.changed === true ? { type: 'sub_account', id: result.row.id } : null,
  )
}

/** The sub-account with its new status and whether it changed, or null for an unknown one. */
export function setStatusWithEvent(
  sql: Sql,
  origin: Origin,
  parentId: string,
  id: string,
  status: TenantStatus,
): Promise<{ row: TenantRow; changed: boolean } | null> {
  const setStatus = async (db: Db) => {
    const s = new Statement()
    const newStatus = s.param(status)
    const [result] = await changeWithEvent<(TenantRow & { changed: boolean })[]>(
      db,
      s,
      `${lockedBefore(s, parentId, id)},
      changed as (
        update tenants set
          status = ${newStatus},
          updated_at = now(),
          deactivated_at = ${status === 'active' ? 'null' : 'coalesce(deactivated_at, now())'}
        where id = (select id from before where status <> ${newStatus}::text)
        returning ${COLUMNS}
      )`,
      statementEvent(origin, {
        accountId: parentId,
        type: status === 'active' ? 'sub_account.reactivated' : 'sub_account.deactivated',
        target: { type: 'sub_account', id: 'changed.id' },
        object: SUB_ACCOUNT_CHANGED,
        previous: `jsonb_build_object('status', before.status, 'deactivated_at', ${isoSql('before.deactivated_at')})`,
        source: 'changed, before',
      }),
      changedOrBefore(),
    )
    if (result === undefined) return null
    const { changed, ...row } = result
    return { row, changed }
  }
  return runChange(sql, origin, setStatus, (result) =>
    result?.changed === true ? { type: 'sub_account', id: result.row.id } : null,
  )
}
