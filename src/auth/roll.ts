// Rolling a key (docs/credentials.md, key lifecycle): a new key with the old one's name, scopes and
// expiry, and the old one kept working for an overlap, so that clients can move over without a
// moment with no working key. Shared by the management API and the CLI.
import { type Origin, recordEvent } from '../events/record.js'
import type { Sql } from '../store/db.js'
import { inheritKeyMarks } from '../store/alerts.js'
import { lockKey, shortenKey, type RevokedKeyRow } from '../store/api-keys.js'
import { keyObject } from './key-changes.js'
import { keyState } from '../shared/key-expiry.js'
import { mintKey, type MintedKey } from './mint.js'
import { inTransaction } from '../store/transaction.js'
import { checkScopes, type KeyRules, rolledExpiry } from '../guardrails/mint-rules.js'

export type RollResult =
  | { outcome: 'rolled'; old: RevokedKeyRow; minted: MintedKey }
  | { outcome: 'not_found' }
  | { outcome: 'not_active'; state: 'expired' | 'revoked' }

export interface RollInput {
  tenantId: string
  keyId: string
  /** How long the old key keeps working; 0 revokes it at once. */
  overlapSeconds: number
  /** Sub-account keys come with a client secret, parent keys without. */
  withClientSecret: boolean
  /** The gateway's clock, which authentication reads too (ms since the epoch). */
  nowMs?: number
  /** Who rolls it, for the event (docs/events.md), and the parent account whose log shows it. */
  origin: Origin
  accountId: string
  /** A sub-account key's ceiling and policy: its scopes must be within them, its expiry is brought within the policy's. */
  rules?: KeyRules
}

/**
 * Mints the successor and shortens (or revokes) the old key in one transaction. The old key's row
 * is locked first: of two rolls of one key, the second waits and then sees what the first did, so
 * a key revoked by a roll with no overlap is never rolled again. The `api_key.rolled` event is
 * written in the same transaction: it targets the new key, and `previous` is the old key as it was.
 * The new key takes the old one's `api_key.expiring` marks: its end was announced already.
 */
export function rollKey(sql: Sql, input: RollInput): Promise<RollResult> {
  return inTransaction(sql, async (tx): Promise<RollResult> => {
    const nowMs = input.nowMs ?? Date.now()
    const old = await lockKey(tx, input.tenantId, input.keyId)
    if (old === null) return { outcome: 'not_found' }
    const state = keyState(old, nowMs)
    if (state !== 'active') return { outcome: 'not_active', state }
    const rules = input.rules ?? { ceiling: null, policy: null }
    checkScopes(rules, old.scopes, '/scopes', ': mint a new key within them, and revoke this one')
    const minted = await mintKey(tx, {
      tenantId: old.tenant_id,
      name: old.name,
      scopes: old.scopes,
      withClientSecret: input.withClientSecret,
      expiresAt: rolledExpiry(rules, old.expires_at, nowMs),
      rolledFrom: old.id,
      ipAllowlist: old.ip_allowlist,
    })
    const until = new Date(nowMs + input.overlapSeconds * 1000)
    const shortened = await shortenKey(tx, old.id, until, input.overlapSeconds === 0)
    await inheritKeyMarks(tx, old.id, minted.row.id)
    await recordEvent(tx, input.origin, {
      accountId: input.accountId,
      type: 'api_key.rolled',
      target: { type: 'api_key', id: minted.row.id },
      object: keyObject(minted.row, input.accountId, nowMs),
      previous: keyObject(old, input.accountId, nowMs),
    })
    return { outcome: 'rolled', old: shortened, minted }
  })
}
