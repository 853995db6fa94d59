// Minting and revoking keys with their events (docs/events.md), for the management API and the
// CLI alike: each change writes its event in its own statement, so that both commit together or
// not at all. Rolling is in roll.ts.
import { keyObject as keyObjectSql, keyStateSql } from '../events/present-sql.js'
import { type Origin, recordEvent, runChange, statementEvent } from '../events/record.js'
import { presentKey } from '../schemas/present.js'
import type { Sql, Tx } from '../store/db.js'
import { changedOrBefore, changeWithEvent } from '../store/events.js'
import { KEY_COLUMNS, insertKeySql, type KeyRow, type RevokedKeyRow } from '../store/api-keys.js'
import { Statement } from '../store/statement.js'
import type { TenantRow } from '../store/tenants.js'
import { type KeyToMint, keyMaterial, type MintedKey } from './mint.js'

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

export function mintKeyWithEvent(sql: Sql, origin: Origin, accountId: string, input: KeyToMint): Promise<MintedKey> {
  const { key, ...secrets } = keyMaterial(input)
  const mint = async (db: Sql | Tx): Promise<MintedKey> => {
    const s = new Statement()
    const [row] = await changeWithEvent<KeyRow[]>(
      db,
      s,
      `changed as (${insertKeySql(db, s, key)})`,
      statementEvent(origin, {
        accountId,
        type: 'api_key.created',
        target: { type: 'api_key', id: 'changed.id' },
        object: keyObjectSql('changed', s.param(accountId)),
        previous: 'null::jsonb',
        source: 'changed',
      }),
      'select * from changed',
    )
    return { row: row!, ...secrets }
  }
  return runChange(sql, origin, mint, (minted) => ({ type: 'api_key', id: minted.row.id }))
}

/**
 * Revokes a key of `tenantId` (null: no such key). The row is locked first and its status
 * compared in the same statement, so that a repeat (the key already revoked) writes no event.
 */
export function revokeKeyWithEvent(
  sql: Sql,
  origin: Origin,
  accountId: string,
  tenantId: string,
  keyId: string,
): Promise<RevokedKeyRow | null> {
  const columns = `${KEY_COLUMNS}, key_digest`
  const revoke = async (db: Sql | Tx) => {
    const s = new Statement()
    const [result] = await changeWithEvent<(RevokedKeyRow & { changed: boolean })[]>(
      db,
      s,
      `before as (
        select ${columns} from api_keys where id = ${s.param(keyId)} and tenant_id = ${s.param(tenantId)} for update
      ), changed as (
        update api_keys set status = 'revoked', revoked_at = coalesce(revoked_at, now())
        where id = (select id from before where status <> 'revoked')
        returning ${columns}
      )`,
      statementEvent(origin, {
        accountId,
        type: 'api_key.revoked',
        target: { type: 'api_key', id: 'changed.id' },
        object: keyObjectSql('changed', s.param(accountId)),
        previous: `jsonb_build_object('status', ${keyStateSql('before')}, 'revoked_at', null)`,
        source: 'changed, before',
      }),
      changedOrBefore(),
    )
    if (result === undefined) return null
    const { changed, ...row } = result
    return { row, changed }
  }
  return runChange(sql, origin, revoke, (result) =>
    result?.changed === true ? { type: 'api_key', id: result.row.id } : null,
  ).then((result) => result?.row ?? null)
}
