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
  if (scopes.some((granted) => scopeCovers(granted, needed))) return
  throw new ApiError('insufficient_scope', `this key lacks the scope ${needed}`, {
    headers: { 'www-authenticate': `Bearer error="insufficient_scope", scope="${needed}"` },
  })
}

/** Keeps the first occurrence of each scope, in order. */
export function uniqueScopes(scopes: readonly string[]): string[] {
  return [...new Set(scopes)]
}
