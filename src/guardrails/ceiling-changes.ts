// The operator's change of a parent account's scope ceiling (`cli -- accounts scopes`), with its
// `account.scopes_updated` event in the same transaction (docs/events.md). The row is locked
// between reading the ceiling and writing it; a change that changes nothing writes neither.
import { type Origin, recordEvent } from '../events/record.js'
import { sameJson } from '../events/same-json.js'
import type { Sql } from '../store/db.js'
import { getTenant, setScopeCeiling, type TenantRow } from '../store/tenants.js'
import { inTransaction } from '../store/transaction.js'

/** The account as it stands after the change; null when `accountId` names no parent account. */
export function setScopeCeilingWithEvent(
  sql: Sql,
  accountId: string,
  allowed: readonly string[] | null,
  origin: Origin,
): Promise<{ account: TenantRow; allowed: string[] | null } | null> {
  return inTransaction(sql, async (tx) => {
    const [current] = await tx<{ parent_id: string | null; allowed: string[] | null }[]>`
      select parent_id, to_jsonb(allowed_scopes) as allowed from tenants where id = ${accountId} for update`
    if (current === undefined || current.parent_id !== null) return null
    const after = allowed === null ? null : [...allowed]
    if (sameJson(current.allowed, after)) return { account: (await getTenant(tx, accountId))!, allowed: after }
    await setScopeCeiling(tx, accountId, after)
    const account = (await getTenant(tx, accountId))!
    await recordEvent(tx, origin, {
      accountId,
      type: 'account.scopes_updated',
      target: { type: 'account', id: accountId },
      object: {
        id: account.id,
        name: account.name,
        external_id: account.external_id,
        created_at: account.created_at.toISOString(),
        allowed_scopes: after,
      },
      previous: { allowed_scopes: current.allowed },
    })
    return { account, allowed: after }
  })
}
