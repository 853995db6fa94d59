// The operator's change of a parent account's cells (`cli -- accounts placement`): the cells its
// sub-accounts may be placed in and its default cell, with the `account.placement_updated` event
// that tells the parent (docs/events.md) in the same transaction. The row is locked between
// reading and writing; a change that changes nothing writes neither. The caller tells the
// replicas: the default is in the account's cached tenant record.
import type { Sql } from '../store/db.js'
import { type AccountCells, getTenant, setAccountCells, type TenantRow } from '../store/tenants.js'
import { inTransaction } from '../store/transaction.js'
import { type Origin, recordEvent } from './record.js'
import { sameJson } from './same-json.js'

/** The account and its cells as they stand after the change; null when `accountId` names no parent account. */
export function changeAccountCells(
  sql: Sql,
  accountId: string,
  cells: AccountCells,
  origin: Origin,
): Promise<{ account: TenantRow; changed: boolean } | null> {
  return inTransaction(sql, async (tx) => {
    const [current] = await tx<{ parent_id: string | null; cells: string[] | null; default_cell: string | null }[]>`
      select parent_id, to_jsonb(allowed_cells) as cells, placement as default_cell
      from tenants where id = ${accountId} for update`
    if (current === undefined || current.parent_id !== null) return null
    const before = { cells: current.cells, default_cell: current.default_cell }
    const after = { cells: cells.allowed === null ? null : [...cells.allowed], default_cell: cells.default }
    if (sameJson(before, after)) return { account: (await getTenant(tx, accountId))!, changed: false }
    await setAccountCells(tx, accountId, cells)
    const account = (await getTenant(tx, accountId))!
    await recordEvent(tx, origin, {
      accountId,
      type: 'account.placement_updated',
      target: { type: 'account', id: accountId },
      object: {
        id: account.id,
        name: account.name,
        external_id: account.external_id,
        created_at: account.created_at.toISOString(),
        ...after,
      },
      previous: before,
    })
    return { account, changed: true }
  })
}
