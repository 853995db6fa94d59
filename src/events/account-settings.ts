// A parent account's settings changed by the parent (PATCH /v1/sub-accounts/settings) or the
// operator (`cli -- accounts leak-policy`), with its account.settings_updated event in the same
// transaction: `object` the settings as they now are, `previous` the members changed as they were.
// A change that changes nothing writes no event.
import { type AccountSettingsRow, lockedAccountSettings, setAccountSettings } from '../store/account-settings.js'
import type { Sql } from '../store/db.js'
import { getTenant, type TenantRow } from '../store/tenants.js'
import { inTransaction } from '../store/transaction.js'
import { markClaim, type Origin, recordEvent } from './record.js'

/** The members to set; one left out keeps its value. */
export type SettingsChange = Partial<AccountSettingsRow>

/**
 * The account and its settings after the change, and whether anything changed; null when
 * `accountId` names no parent account.
 */
export function changeAccountSettings(
  sql: Sql,
  accountId: string,
  change: SettingsChange,
  origin: Origin,
): Promise<{ account: TenantRow; settings: AccountSettingsRow; changed: boolean } | null> {
  return inTransaction(sql, async (tx) => {
    const before = await lockedAccountSettings(tx, accountId)
    if (before === null) return null
    const settings: Record<string, unknown> = { ...before }
    const previous: Record<string, unknown> = {}
    for (const [name, value] of Object.entries(change)) {
      if (value === undefined || value === settings[name]) continue
      previous[name] = settings[name]
      settings[name] = value
    }
    const changed = Object.keys(previous).length > 0
    if (changed) {
      await setAccountSettings(tx, accountId, settings as unknown as AccountSettingsRow)
      await recordEvent(tx, origin, {
        accountId,
        type: 'account.settings_updated',
        target: { type: 'account', id: accountId },
        object: { ...settings },
        previous,
      })
    } else await markClaim(tx, origin, { type: 'account', id: accountId })
    return { account: (await getTenant(tx, accountId))!, settings: settings as unknown as AccountSettingsRow, changed }
  })
}
