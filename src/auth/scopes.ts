// Scope names and the check that a key holds one (DESIGN §3, §6).
import { ApiError } from '../errors.js'

export const SCOPE_PATTERN = '^[a-z][a-z0-9_.-]*(:[a-z0-9_.*-]+)*$'
export const MANAGEMENT_SCOPES = ['sub_accounts:read', 'sub_accounts:write'] as const

/**
 * True when `granted` covers `needed`: equal, or equal segment by segment where a granted
 * segment `*` stands for any one segment (`tracking:*` covers `tracking:read`).
 */
export function scopeCovers(granted: string, needed: string): boolean {
  if (granted === needed) return true
  const have = granted.split(':')
  const want = needed.split(':')
  return have.length === want.length && have.every((segment, i) => segment === '*' || segment === want[i])
}

export function requireScope(scopes: readonly string[], needed: string): void {
  requireScopes(scopes, [needed])
}

/** Every scope in `needed` must be covered; the 403 names them all (RFC 6750 §3: space-separated). */
export function requireScopes(scopes: readonly string[], needed: readonly string[]): void {
  const missing = needed.filter((scope) => !scopes.some((granted) => scopeCovers(granted, scope)))
  if (missing.length === 0) return
  throw new ApiError('insufficient_scope', `this key lacks the scope ${missing.join(' and ')}`, {
    headers: { 'www-authenticate': `Bearer error="insufficient_scope", scope="${needed.join(' ')}"` },
  })
}

/** Keeps the first occurrence of each scope, in order. */
export function uniqueScopes(scopes: readonly string[]): string[] {
  return [...new Set(scopes)]
}
