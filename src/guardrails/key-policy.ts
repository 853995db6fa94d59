// A sub-account's key policy (docs/api.md, Key policies and IP allow-lists), set by its parent:
// which scopes its keys may have, how long they may live, and from which addresses they may be used.
import { isManagementScope } from '../shared/scopes.js'
import { validationFailed } from '../errors.js'
import { cidrProblem } from './ip-allowlist.js'

export interface KeyPolicy {
  allowed_scopes: string[] | null
  max_ttl_seconds: number | null
  ip_allowlist: string[] | null
}

/**
 * A body's policy (members left out are null) as stored: null when every member is null. A bad
 * allow-list entry, or a `sub_accounts` scope, is a 400 naming it (`path`: where the body holds
 * the policy).
 */
export function storedKeyPolicy(body: Partial<KeyPolicy> | null, path: string): KeyPolicy | null {
  if (body === null) return null
  const reserved = body.allowed_scopes?.findIndex(isManagementScope) ?? -1
  if (reserved !== -1)
    throw validationFailed([
      { path: `${path}/allowed_scopes/${reserved}`, message: 'sub_accounts scopes are for parent keys only' },
    ])
  checkAllowlist(body.ip_allowlist ?? null, `${path}/ip_allowlist`)
  const policy: KeyPolicy = {
    allowed_scopes: body.allowed_scopes == null ? null : [...new Set(body.allowed_scopes)],
    max_ttl_seconds: body.max_ttl_seconds ?? null,
    ip_allowlist: body.ip_allowlist == null ? null : [...new Set(body.ip_allowlist)],
  }
  return Object.values(policy).every((member) => member === null) ? null : policy
}

/**
 * The policy in force for a sub-account whose own is `own` under a plan whose policy is `plan`
 * (docs/api.md, Plans): member by member, its own where it sets one, else its plan's.
 */
export function effectiveKeyPolicy(own: KeyPolicy | null, plan: KeyPolicy | null): KeyPolicy | null {
  if (plan === null || own === null) return own ?? plan
  return {
    allowed_scopes: own.allowed_scopes ?? plan.allowed_scopes,
    max_ttl_seconds: own.max_ttl_seconds ?? plan.max_ttl_seconds,
    ip_allowlist: own.ip_allowlist ?? plan.ip_allowlist,
  }
}

/** As the API shows it: every member, null where none is set. */
export function shownKeyPolicy(stored: KeyPolicy | null): KeyPolicy {
  return stored ?? { allowed_scopes: null, max_ttl_seconds: null, ip_allowlist: null }
}

/** Throws a 400 naming the first entry of `list` that is not an address or CIDR. */
export function checkAllowlist(list: readonly string[] | null, path: string): void {
  if (list === null) return
  for (const [i, entry] of list.entries()) {
    const problem = cidrProblem(entry)
    if (problem !== null) throw validationFailed([{ path: `${path}/${i}`, message: problem }])
  }
}
