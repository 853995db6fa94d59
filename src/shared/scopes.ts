// Scope names and the check that a key holds one (docs/api.md).
import { ApiError } from '../errors.js'

export const SCOPE_PATTERN = '^[a-z][a-z0-9_.-]*(:[a-z0-9_.*-]+)*$'
export const MANAGEMENT_SCOPES = ['sub_accounts:read', 'sub_accounts:write'] as const

/** A `sub_accounts` scope or pattern: a parent key's own, which a sub-account key never holds. */
export function isManagementScope(scope: string): boolean {
  return scope === 'sub_accounts' || scope.startsWith('sub_accounts:')
}

/**
 * True when `granted` covers `needed`: equal, or equal segment by segment where a granted
 * segment `*` stands for any one segment (`tracking:*` covers `tracking:read`).
 */
export function scopeCovers(granted: string, needed: string): boolean {
  if (granted === needed) return true
  // Without a wildcard only equality covers: no splitting (this runs for every proxied request).
  if (!granted.includes('*')) return false
  const have = granted.split(':')
  const want = needed.split(':')
  return have.length === want.length && have.every((segment, i) => segment === '*' || segment === want[i])
}

/**
 * The 403 for a key whose `scopes` do not cover every scope in `needed`, naming them all (RFC 6750
 * §3: space-separated); undefined when they do. Returned, not thrown, for callback-style callers.
 */
export function insufficientScope(scopes: readonly string[], needed: readonly string[]): ApiError | undefined {
  // Built only for a refusal: this runs for every proxied request.
  let missing: string[] | undefined
  for (const scope of needed) {
    if (!isGranted(scopes, scope)) {
      missing ??= []
      missing.push(scope)
    }
  }
  if (missing === undefined) return undefined
  return new ApiError('insufficient_scope', `this key lacks the scope ${missing.join(' and ')}`, {
    headers: { 'www-authenticate': `Bearer error="insufficient_scope", scope="${needed.join(' ')}"` },
  })
}

function isGranted(scopes: readonly string[], needed: string): boolean {
  for (const granted of scopes) if (scopeCovers(granted, needed)) return true
  return false
}

/** Throws insufficientScope's 403 unless `scopes` cover `needed`. */
export function requireScope(scopes: readonly string[], needed: string): void {
  const refusal = insufficientScope(scopes, [needed])
  if (refusal !== undefined) throw refusal
}

/** Keeps the first occurrence of each scope, in order. */
export function uniqueScopes(scopes: readonly string[]): string[] {
  return [...new Set(scopes)]
}
