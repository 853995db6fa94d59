// The rules a new key must meet (docs/api.md, Key policies): its scopes within its parent's
// ceiling (the operator's) and its sub-account's key policy, and its expiry within the policy's
// longest life. Checked when a key is minted and when it is rolled, before anything is written.
import { validationFailed } from '../errors.js'
import type { KeyPolicy } from './key-policy.js'
import { firstScopeOutside } from './scope-ceiling.js'

export interface KeyRules {
  /** The parent account's ceiling; null: any scope. */
  ceiling: readonly string[] | null
  /** The sub-account's key policy; null: none. */
  policy: KeyPolicy | null
}

/**
 * Throws a 400 for the first of `scopes` outside the ceiling or the policy. `path` is where the
 * scopes are in the request (`/body/scopes`); `advice`, what to do instead.
 */
export function checkScopes(rules: KeyRules, scopes: readonly string[], path: string, advice = ''): void {
  const outsideCeiling = firstScopeOutside(scopes, rules.ceiling)
  if (outsideCeiling !== undefined)
    throw validationFailed([
      {
        path: `${path}/${outsideCeiling.index}`,
        message: `${outsideCeiling.scope} is outside the scopes the operator allows this account (${rules.ceiling!.join(', ')})${advice}`,
      },
    ])
  const allowed = rules.policy?.allowed_scopes ?? null
  const outsidePolicy = firstScopeOutside(scopes, allowed)
  if (outsidePolicy !== undefined)
    throw validationFailed([
      {
        path: `${path}/${outsidePolicy.index}`,
        message: `${outsidePolicy.scope} is outside the sub-account's key_policy.allowed_scopes (${allowed!.join(', ')})${advice}`,
      },
    ])
}

/** Throws a 400 when the policy has a longest life and `expiresAt` is absent or beyond it. */
export function checkExpiry(rules: KeyRules, expiresAt: Date | null, nowMs: number): void {
  const maxTtl = rules.policy?.max_ttl_seconds ?? null
  if (maxTtl === null) return
  if (expiresAt === null)
    throw validationFailed([
      {
        path: '/body/expires_at',
        message: `is required: the sub-account's key_policy.max_ttl_seconds is ${maxTtl}, so its keys expire within that`,
      },
    ])
  if (expiresAt.getTime() > nowMs + maxTtl * 1000)
    throw validationFailed([
      {
        path: '/body/expires_at',
        message: `is more than key_policy.max_ttl_seconds (${maxTtl}) ahead: choose a time before ${new Date(nowMs + maxTtl * 1000).toISOString()}`,
      },
    ])
}

/** A rolled key's expiry: the old one's, brought within the policy's longest life from now. */
export function rolledExpiry(rules: KeyRules, oldExpiry: Date | null, nowMs: number): Date | null {
  const maxTtl = rules.policy?.max_ttl_seconds ?? null
  if (maxTtl === null) return oldExpiry
  const latest = nowMs + maxTtl * 1000
  return oldExpiry === null || oldExpiry.getTime() > latest ? new Date(latest) : oldExpiry
}
