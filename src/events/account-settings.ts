// A parent account's settings changed by the parent (PATCH /v1/sub-accounts/settings) or the
// operator (`cli -- accounts leak-policy`): today its leak_policy (docs/secret-scanning.md), with
// the account.settings_updated event in the same transaction. A change that changes nothing
// writes no event. Nothing caches the setting: a leak reads it from Postgres where it applies it.
import type { Sql } from '../store/db.js'
import { type LeakPolicy, setLeakPolicy } from '../store/key-leaks.js'
import { getTenant, type TenantRow } from '../store/tenants.js'
import { inTransaction } from '../store/transaction.js'
import { type Origin, recordEvent } from './record.js'

/** The account and its settings after the change; null when `accountId` names no parent account. */
export function changeLeakPolicy(
  sql: Sql,
  accountId: string,
  policy: LeakPolicy,
  origin: Origin,
): Promise<{ account: TenantRow; leak_policy: LeakPolicy } | null> {
  return inTransaction(sql, async (tx) => {
    const before = await setLeakPolicy(tx, accountId, policy)
    if (before === null) return null
    const account = (await getTenant(tx, accountId))!
    if (before !== policy)
      await recordEvent(tx, origin, {
        accountId,
        type: 'account.settings_updated',
        target: { type: 'account', id: accountId },
        object: {
          id: account.id,
          name: account.name,
          external_id: account.external_id,
          created_at: account.created_at.toISOString(),
          leak_policy: policy,
        },
        previous: { leak_policy: before },
      })
    return { account, leak_policy: policy }
  })
}
