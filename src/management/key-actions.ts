// What can be done to a sub-account's keys, with the rules every caller must meet: the management
// API (key-routes.ts) and the sub-account portal (portal/api-routes.ts) both mint, roll and revoke
// through these, so a key minted in the portal is held to the same key policy and scope ceiling.
import type { Alerts } from '../alerts/plugin.js'
import type { FastifyRequest } from 'fastify'
import type { Static } from 'typebox'
import { DEFAULT_ROLL_OVERLAP_SECONDS, parseExpiresAt } from '../shared/key-expiry.js'
import { mintKeyWithEvent, revokeKeyWithEvent } from '../auth/key-changes.js'
import type { MintedKey } from '../auth/mint.js'
import { isManagementScope } from '../shared/scopes.js'
import { type RollResult, rollKey } from '../auth/roll.js'
import { type CacheInvalidator, keyEntries } from '../cache/index.js'
import { ApiError, validationFailed } from '../errors.js'
import type { Origin } from '../events/record.js'
import { checkAllowlist, effectiveKeyPolicy, type KeyPolicy } from '../guardrails/key-policy.js'
import { checkExpiry, checkScopes } from '../guardrails/mint-rules.js'
import type { RevokedKeyRow } from '../store/api-keys.js'
import type { Sql } from '../store/db.js'
import { planInForceOf } from '../store/plans.js'
import { scopeCeiling, type TenantRow } from '../store/tenants.js'
import { notFound, trimmedName } from './common.js'
import { presentKey } from '../schemas/present.js'
import type { MintKeyBody } from '../schemas/keys.js'

export interface KeyActionContext {
  sql: Sql
  cache: CacheInvalidator
  /** Who acts, for the events. */
  origin: Origin
  /** The sub-account's parent: its scope ceiling applies, its audit log shows the events. */
  parentId: string
  subAccount: TenantRow
  /** Told the end of each key minted or rolled (the alerts'). */
  keyMinted: Alerts['keyMinted']
}

/** The roll's preValidation: no body at all is an empty one, since every field is optional. */
export async function noBodyIsEmpty(request: FastifyRequest): Promise<void> {
  request.body ??= {}
}

/** A key with its secrets, as the mint and the roll show it, once. */
export function withSecrets(row: Parameters<typeof presentKey>[0], apiKey: string, clientSecret: string) {
  const { revoked_at: _revoked, last_used_at: _used, leaked: _leaked, ...key } = presentKey(row)
  return { ...key, api_key: apiKey, client_secret: clientSecret }
}

/** A mint's body once checked on its own, before anything is looked up. */
export interface MintRequest {
  name: string
  scopes: string[]
  expiresAt: Date | null
  ipAllowlist: string[] | null
}

/**
 * The body's own checks (400, saying which field): run before the sub-account is looked up, so
 * that a bad body is a 400 whatever the sub-account, never a 404 that would say which exist.
 */
export function checkedMintBody(body: Static<typeof MintKeyBody>): MintRequest {
  const { name, scopes } = body
  const reserved = scopes.findIndex(isManagementScope)
  if (reserved !== -1) {
    throw validationFailed([
      { path: `/body/scopes/${reserved}`, message: 'sub_accounts scopes are for parent keys only' },
    ])
  }
  const label = trimmedName(name, '/body/name')
  let expiresAt: Date | null = null
  if (body.expires_at != null) {
    const parsed = parseExpiresAt(body.expires_at)
    if ('error' in parsed) throw validationFailed([{ path: '/body/expires_at', message: parsed.error }])
    expiresAt = parsed.at
  }
  const ipAllowlist = body.ip_allowlist ?? null
  checkAllowlist(ipAllowlist, '/body/ip_allowlist')
  return { name: label, scopes, expiresAt, ipAllowlist: ipAllowlist === null ? null : [...new Set(ipAllowlist)] }
}

/** The sub-account's key policy in force: its own, filled in member by member from its plan (docs/api.md, Plans). */
async function policyInForce(sql: Sql, subAccount: TenantRow): Promise<KeyPolicy | null> {
  return effectiveKeyPolicy(subAccount.key_policy, (await planInForceOf(sql, subAccount))?.key_policy ?? null)
}

/** Mints a key within the parent's ceiling and the sub-account's key policy (400 otherwise, saying why). */
export async function mintSubAccountKey(context: KeyActionContext, mint: MintRequest): Promise<MintedKey> {
  const { sql, cache, origin, parentId, subAccount } = context
  const rules = { ceiling: await scopeCeiling(sql, parentId), policy: await policyInForce(sql, subAccount) }
  checkScopes(rules, mint.scopes, '/body/scopes')
  checkExpiry(rules, mint.expiresAt, Date.now())
  const minted = await mintKeyWithEvent(sql, origin, parentId, {
    tenantId: subAccount.id,
    name: mint.name,
    scopes: mint.scopes,
    withClientSecret: true,
    expiresAt: mint.expiresAt,
    ipAllowlist: mint.ipAllowlist,
  })
  context.keyMinted(minted.row.expires_at)
  await cache.invalidate(keyEntries({ id: minted.row.id, keyDigest: minted.keyDigest }))
  return minted
}

/** Revokes a key of the sub-account (404 for one it does not have); repeating is harmless. */
export async function revokeSubAccountKey(context: KeyActionContext, keyId: string): Promise<RevokedKeyRow> {
  const { sql, cache, origin, parentId, subAccount } = context
  const row = await revokeKeyWithEvent(sql, origin, parentId, subAccount.id, keyId)
  if (row === null) throw notFound('key')
  await cache.invalidate(keyEntries({ id: row.id, keyDigest: row.key_digest }))
  return row
}

/** Rolls a key of the sub-account within the ceiling and policy: the new key (404, 409 key_not_active). */
export async function rollSubAccountKey(
  context: KeyActionContext,
  keyId: string,
  overlapSeconds: number = DEFAULT_ROLL_OVERLAP_SECONDS,
): Promise<Extract<RollResult, { outcome: 'rolled' }>> {
  const { sql, cache, origin, parentId, subAccount } = context
  const result = await rollKey(sql, {
    tenantId: subAccount.id,
    keyId,
    overlapSeconds,
    withClientSecret: true,
    origin,
    accountId: parentId,
    rules: { ceiling: await scopeCeiling(sql, parentId), policy: await policyInForce(sql, subAccount) },
  })
  if (result.outcome === 'not_found') throw notFound('key')
  if (result.outcome === 'not_active')
    throw new ApiError('key_not_active', `the key is ${result.state}: only an active key can be rolled`)
  const { old, minted } = result
  context.keyMinted(minted.row.expires_at)
  // Committed: both keys' cache entries are stale (the old key's expiry moved, the new one may be cached as unknown).
  await cache.invalidate([
    ...keyEntries({ id: old.id, keyDigest: old.key_digest }),
    ...keyEntries({ id: minted.row.id, keyDigest: minted.keyDigest }),
  ])
  return result
}
