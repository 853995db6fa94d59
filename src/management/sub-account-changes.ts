// Changes of sub-accounts with their events (docs/events.md): each change and its event commit
// together or not at all. The row is locked and compared first, so that a change that changes
// nothing (a repeated deactivate, a PATCH with the values already there) writes neither the row
// nor an event.
import { type Origin, recordEvent } from '../events/record.js'
import { sameJson } from '../events/same-json.js'
import type { Sql, Tx } from '../store/db.js'
import {
  COLUMNS,
  createSubAccount,
  setSubAccountStatus,
  type SubAccountPatch,
  type TenantRow,
  type TenantStatus,
  updateSubAccount,
} from '../store/tenants.js'
import { storedLimits } from '../tenancy/limits.js'
import { presentSubAccount } from './present.js'
import { inTransaction } from '../store/transaction.js'

async function lockSubAccount(tx: Tx, parentId: string, id: string): Promise<TenantRow | null> {
  const [row] = await tx<TenantRow[]>`
    select ${tx.unsafe(COLUMNS)} from tenants where id = ${id} and parent_id = ${parentId} for update`
  return row ?? null
}

export function createSubAccountWithEvent(
  sql: Sql,
  origin: Origin,
  parentId: string,
  input: Parameters<typeof createSubAccount>[2],
): Promise<TenantRow> {
  return inTransaction(sql, async (tx) => {
    const row = await createSubAccount(tx, parentId, input)
    await recordEvent(tx, origin, {
      accountId: parentId,
      type: 'sub_account.created',
      target: { type: 'sub_account', id: row.id },
      object: presentSubAccount(row),
      previous: null,
    })
    return row
  })
}

export interface SubAccountUpdate {
  row: TenantRow
  /** The row before; the same as `row` when nothing changed. */
  before: TenantRow
}

/** The patch applied, or null for an unknown sub-account (or another parent's). */
export function updateSubAccountWithEvent(
  sql: Sql,
  origin: Origin,
  parentId: string,
  id: string,
  patch: SubAccountPatch,
): Promise<SubAccountUpdate | null> {
  return inTransaction(sql, async (tx) => {
    const before = await lockSubAccount(tx, parentId, id)
    if (before === null) return null
    const shownBefore = presentSubAccount(before)
    const wanted: Record<string, unknown> = {
      name: patch.name,
      external_id: patch.externalId,
      metadata: patch.metadata,
      limits:
        patch.limits === undefined
          ? undefined
          : presentSubAccount({ ...before, limits: storedLimits(patch.limits) }).limits,
    }
    const changed = Object.keys(wanted).filter(
      (field) =>
        wanted[field] !== undefined && !sameJson(wanted[field], shownBefore[field as keyof typeof shownBefore]),
    )
    if (changed.length === 0) return { row: before, before }
    const row = (await updateSubAccount(tx, parentId, id, {
      ...(changed.includes('name') ? { name: patch.name } : {}),
      ...(changed.includes('external_id') ? { externalId: patch.externalId } : {}),
      ...(changed.includes('metadata') ? { metadata: patch.metadata } : {}),
      ...(changed.includes('limits') ? { limits: patch.limits } : {}),
    }))!
    await recordEvent(tx, origin, {
      accountId: parentId,
      type: 'sub_account.updated',
      target: { type: 'sub_account', id: row.id },
      object: presentSubAccount(row),
      previous: Object.fromEntries(changed.map((field) => [field, shownBefore[field as keyof typeof shownBefore]])),
    })
    return { row, before }
  })
}

/** The sub-account with its new status and whether it changed, or null for an unknown one. */
export function setStatusWithEvent(
  sql: Sql,
  origin: Origin,
  parentId: string,
  id: string,
  status: TenantStatus,
): Promise<{ row: TenantRow; changed: boolean } | null> {
  return inTransaction(sql, async (tx) => {
    const before = await lockSubAccount(tx, parentId, id)
    if (before === null) return null
    if (before.status === status) return { row: before, changed: false }
    const row = (await setSubAccountStatus(tx, parentId, id, status))!
    await recordEvent(tx, origin, {
      accountId: parentId,
      type: status === 'active' ? 'sub_account.reactivated' : 'sub_account.deactivated',
      target: { type: 'sub_account', id: row.id },
      object: presentSubAccount(row),
      previous: { status: before.status, deactivated_at: before.deactivated_at?.toISOString() ?? null },
    })
    return { row, changed: true }
  })
}
