// Which scopes the mint form offers (docs/console.md, API keys): those a key of the sub-account may
// be given, within the operator's scope ceiling (GET /v1/sub-accounts/scopes) and the
// sub-account's key policy, as the API will judge them (shared/scopes.ts `scopeCovers`, repeated here
// because the bundle takes no server code). The API still has the last word on a mint.

/** `granted` covers `needed`: equal, or equal segment by segment where a granted `*` is any one segment. */
export function covers(granted: string, needed: string): boolean {
  if (granted === needed) return true
  if (!granted.includes('*')) return false
  const have = granted.split(':')
  const want = needed.split(':')
  return have.length === want.length && have.every((segment, i) => segment === '*' || segment === want[i])
}

/** Within `allowed` (null: no bound). */
export function within(allowed: readonly string[] | null, scope: string): boolean {
  return allowed === null || allowed.some((entry) => covers(entry, scope))
}

/**
 * The scopes to offer: the routes' scopes, and the ceiling's and the policy's own entries
 * (patterns included: a key may be given `tracking:*` where the lists allow it), each kept only
 * when both lists allow it; never a `sub_accounts` scope, which no sub-account key holds. Sorted.
 */
export function grantableScopes(
  routeScopes: readonly string[],
  ceiling: readonly string[] | null,
  policy: readonly string[] | null,
): string[] {
  const candidates = new Set([...routeScopes, ...(ceiling ?? []), ...(policy ?? [])])
  return [...candidates]
    .filter((scope) => scope !== 'sub_accounts' && !scope.startsWith('sub_accounts:'))
    .filter((scope) => within(ceiling, scope) && within(policy, scope))
    .sort()
}
