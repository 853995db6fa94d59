// A parent account's settings (docs/api.md, Settings): the columns of its tenants row that it sets
// for itself, read and written together so that a change and its event see one row.
import type { Sql, Tx } from './db.js'
import type { LeakPolicy } from './key-leaks.js'

/** What GET /v1/sub-accounts/settings answers. */
export interface AccountSettingsRow {
  /** The plan of its sub-accounts without a plan_id; null: none. */
  default_plan_id: string | null
  /** What a leaked key of the account comes to. */
  leak_policy: LeakPolicy
}

const COLUMNS = 'default_plan_id, leak_policy'

/** A parent account's settings; null when `accountId` names no parent account. */
export async function accountSettings(db: Sql | Tx, accountId: string): Promise<AccountSettingsRow | null> {
  const [row] = await db<AccountSettingsRow[]>`
    select ${db.unsafe(COLUMNS)} from tenants where id = ${accountId} and parent_id is null`
  return row ?? null
}

/** The same, its row locked for the change that follows in `tx`. */
export async function lockedAccountSettings(tx: Tx, accountId: string): Promise<AccountSettingsRow | null> {
  const [row] = await tx<AccountSettingsRow[]>`
    select ${tx.unsafe(COLUMNS)} from tenants where id = ${accountId} and parent_id is null for update`
  return row ?? null
}

/** Writes the settings given (the row locked by lockedAccountSettings). */
export async function setAccountSettings(tx: Tx, accountId: string, settings: AccountSettingsRow): Promise<void> {
  await tx`update tenants set default_plan_id = ${settings.default_plan_id}, leak_policy = ${settings.leak_policy},
    updated_at = now() where id = ${accountId}`
}
