// Issuing keys: the value and the client secret exist only in the return value of these
// functions; the store receives their digests.
import type { Sql, Tx } from '../store/db.js'
import { insertKey, type KeyRow, type NewKey } from '../store/api-keys.js'
import { createParentAccount, type TenantRow } from '../store/tenants.js'
import { generateApiKey, generateClientSecret } from './key-format.js'
import { MANAGEMENT_SCOPES, uniqueScopes } from '../shared/scopes.js'

export interface MintedKey {
  row: KeyRow
  apiKey: string
  clientSecret: string | null
  /** SHA-256 of the key: the name of its cache entries. */
  keyDigest: Buffer
}

export interface KeyToMint {
  tenantId: string
  name: string
  scopes: readonly string[]
  withClientSecret: boolean
  /** Null or absent: never expires. */
  expiresAt?: Date | null
  /** The key this one replaces (a roll). */
  rolledFrom?: string | null
  /** Null or absent: any address (docs/api.md, IP allow-lists). */
  ipAllowlist?: readonly string[] | null
}

/** A new key's secrets and the row that stores their digests, not yet written. */
export function keyMaterial(input: KeyToMint): { key: NewKey } & Omit<MintedKey, 'row'> {
  const { apiKey, prefix, keyDigest } = generateApiKey()
  const secret = input.withClientSecret ? generateClientSecret() : null
  const key: NewKey = {
    tenantId: input.tenantId,
    name: input.name,
    scopes: uniqueScopes(input.scopes),
    prefix,
    keyDigest,
    secretDigest: secret?.secretDigest ?? null,
    expiresAt: input.expiresAt ?? null,
    rolledFrom: input.rolledFrom ?? null,
    ipAllowlist: input.ipAllowlist ?? null,
  }
  return { key, apiKey, clientSecret: secret?.clientSecret ?? null, keyDigest }
}

export async function mintKey(db: Sql | Tx, input: KeyToMint): Promise<MintedKey> {
  const { key, ...secrets } = keyMaterial(input)
  return { row: await insertKey(db, key), ...secrets }
}

/**
 * A parent account and its first key. The key carries both management scopes plus
 * `extraScopes` (docs/configuration.md). Run it in a transaction: the two rows exist together or not at all.
 */
export async function createParentWithKey(
  tx: Tx,
  input: { name: string; externalId: string | null; extraScopes: readonly string[] },
): Promise<{ account: TenantRow; key: MintedKey }> {
  const account = await createParentAccount(tx, { name: input.name, externalId: input.externalId })
  const key = await mintKey(tx, {
    tenantId: account.id,
    name: 'initial',
    scopes: [...MANAGEMENT_SCOPES, ...input.extraScopes],
    withClientSecret: false,
  })
  return { account, key }
}
