// The operator's change of one of a parent account's lists, its scope ceiling (`cli -- accounts
// scopes`) or its portal origins (`cli -- accounts portal-origins`), with the event that tells the
// parent (docs/events.md) in the same transaction. The row is locked between reading the list and
// writing it; a change that changes nothing writes neither. Nothing caches either list: each is
// read from Postgres where it is used, so no replica needs telling.
import type { Sql } from '../store/db.js'
import { type AccountListColumn, getTenant, setAccountList, type TenantRow } from '../store/tenants.js'
import { inTransaction } from '../store/transaction.js'
import { type Origin, recordEvent } from './record.js'
import { sameJson } from './same-json.js'

/** Each list's event (its object and `previous` name the list by its column). */
const EVENT_TYPES = {
  allowed_scopes: 'account.scopes_updated',
  portal_origins: 'account.portal_origins_updated',
} as const satisfies Record<AccountListColumn, string>

/** The account and its list as they stand after the change; null when `accountId` names no parent account. */
export function changeAccountList(
  sql: Sql,
  accountId: string,
  column: AccountListColumn,
  list: readonly string[] | null,
  origin: Origin,
): Promise<{ account: TenantRow; list: string[] | null } | null> {
  return inTransaction(sql, async (tx) => {
    const [current] = await tx<{ parent_id: string | null; list: string[] | null }[]>`
      select parent_id, to_jsonb(${tx(column)}) as list from tenants where id = ${accountId} for update`
    if (current === undefined || current.parent_id !== null) return null
    const after = list === null ? null : [...list]
    if (sameJson(current.list, after)) return { account: (await getTenant(tx, accountId))!, list: after }
    await setAccountList(tx, accountId, column, after)
    const account = (await getTenant(tx, accountId))!
    await recordEvent(tx, origin, {
      accountId,
      type: EVENT_TYPES[column],
      target: { type: 'account', id: accountId },
      object: {
        id: account.id,
        name: account.name,
        external_id: account.external_id,
        created_at: account.created_at.toISOString(),
        [column]: after,
      },
      previous: { [column]: current.list },
    })
    return { account, list: after }
  })
}
