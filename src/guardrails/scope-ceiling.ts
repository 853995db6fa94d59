// Which scopes a key may be minted with (docs/api.md, Key policies): within the operator's ceiling
// of its parent account and its sub-account's key policy. An entry of either may be a pattern
// (`tracking:*`); a requested pattern is allowed only under one at least as wide.
import { scopeCovers } from '../shared/scopes.js'

/** The first of `scopes` that `allowed` does not cover, or undefined; null `allowed` covers all. */
export function firstScopeOutside(
  scopes: readonly string[],
  allowed: readonly string[] | null,
): { index: number; scope: string } | undefined {
  if (allowed === null) return undefined
  const index = scopes.findIndex((scope) => !allowed.some((entry) => scopeCovers(entry, scope)))
  return index === -1 ? undefined : { index, scope: scopes[index]! }
}
