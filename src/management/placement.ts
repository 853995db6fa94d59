// A sub-account's `placement` as a create or a PATCH gives it (docs/api.md, Cells): one of the
// cells the operator lets its parent account use (`cli -- accounts placement`), or null. Checked
// before anything is written; the refusal names the cells the parent may use.
import { validationFailed } from '../errors.js'
import type { Sql } from '../store/db.js'
import { accountCells } from '../store/tenants.js'

/** `placement` as given when the parent may use it (undefined: not given); else 400 validation_failed. */
export async function allowedPlacement(
  sql: Sql,
  parentId: string,
  placement: string | null | undefined,
): Promise<string | null | undefined> {
  if (placement == null) return placement
  const allowed = (await accountCells(sql, parentId))?.allowed ?? null
  if (allowed?.includes(placement)) return placement
  throw validationFailed([
    {
      path: '/body/placement',
      message:
        allowed === null || allowed.length === 0
          ? 'this account may place sub-accounts in no cell (the operator sets its cells): give null'
          : `must be one of the cells this account may use (${allowed.join(', ')}), or null`,
    },
  ])
}
