// Minting and revoking keys with their events (docs/events.md), for the management API and the
// CLI alike: the change and its event commit together or not at all. Rolling is in roll.ts.
import { type Origin, recordEvent } from '../events/record.js'
import { presentKey } from '../management/present.js'
import type { Sql, Tx } from '../store/db.js'
import { type KeyRow, lockKey, revokeKey, type RevokedKeyRow } from '../store/keys.js'
import type { TenantRow } from '../store/tenants.js'
import { keyState } from './key-expiry.js'
import { type MintedKey, mintKey } from './mint.js'
import { inTransaction } from '../store/transaction.js'

/**
 * A key as its events show it: the API's key object (never the key, its secret or a digest), and
 * the sub-account it belongs to (null for a parent account's own key), since the key's id alone
 * does not say where to find it.
 */
export function keyObject(row: KeyRow, accountId: string, nowMs = Date.now()) {
  return { ...presentKey(row, nowMs), sub_account_id: row.tenant_id === accountId ? null : row.tenant_id }
}

/**
 * A new parent account's first event: its first key's api_key.created (docs/events.md: an
 * account's creation has no type of its own). In the transaction that made both.
 */
export function recordFirstKey(tx: Tx, origin: Origin, created: { account: TenantRow; key: MintedKey }) {
  return recordEvent(tx, origin, {
    accountId: created.account.id,
    type: 'api_key.created',
    target: { type: 'api_key', id: created.key.row.id },
    object: keyObject(created.key.row, created.account.id),
    previous: null,
  })
}

export function mintKeyWithEvent(
  sql: Sql,
  origin: Origin,
  accountId: string,
  input: Parameters<typeof mintKey>[1],
): Promise<MintedKey> {
  return inTransaction(sql, async (tx) => {
    const minted = await mintKey(tx, input)
    await recordEvent(tx, origin, {
      accountId,
      type: 'api_key.created',
      target: { type: 'api_key', id: minted.row.id },
      object: keyObject(minted.row, accountId),
      previous: null,
    })
    return minted
  })
}

/**
 * Revokes a key of `tenantId` (null: no such key). The row is locked first, so that a repeat
 * (the key already revoked) is told apart and writes no event.
 */
export function revokeKeyWithEvent(
  sql: Sql,
  origin: Origin,
  accountId: string,
  tenantId: string,
  keyId: string,
): Promise<RevokedKeyRow | null> {
  return inTransaction(sql, async (tx) => {
    const before = await lockKey(tx, tenantId, keyId)
    if (before === null || before.status === 'revoked') return before
    const nowMs = Date.now()
    const after = (await revokeKey(tx, tenantId, keyId))!
    await recordEvent(tx, origin, {
      accountId,
      type: 'api_key.revoked',
      target: { type: 'api_key', id: after.id },
      object: keyObject(after, accountId, nowMs),
      previous: { status: keyState(before, nowMs), revoked_at: null },
    })
    return after
  })
}
