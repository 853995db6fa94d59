// When a key stops working (docs/credentials.md, key lifecycle): the `expires_at` a key is minted
// with, and the overlap a roll leaves the old key. Shared by the management API and the CLI.

import { parseDateTime } from '../dates.js'

/** A key may be minted to expire at most this many years ahead. */
export const MAX_EXPIRY_YEARS = 10
/** A roll leaves the old key working for at most 30 days… */
export const MAX_ROLL_OVERLAP_SECONDS = 2_592_000
/** …and for a day unless told otherwise. */
export const DEFAULT_ROLL_OVERLAP_SECONDS = 86_400

export type KeyState = 'active' | 'expired' | 'revoked'

/** What a client sees: a key active in the table but past its expiry is `expired`. */
export function keyState(key: { status: 'active' | 'revoked'; expires_at: Date | null }, nowMs = Date.now()): KeyState {
  if (key.status === 'revoked') return 'revoked'
  return key.expires_at !== null && key.expires_at.getTime() <= nowMs ? 'expired' : 'active'
}

/**
 * A requested `expires_at`: an RFC 3339 date-time, in the future, at most MAX_EXPIRY_YEARS ahead.
 * Returns the instant, or what is wrong with it (a message for a field error or a CLI line).
 */
export function parseExpiresAt(text: string, nowMs = Date.now()): { at: Date } | { error: string } {
  const at = parseDateTime(text)
  if (at === null) return { error: 'must be an RFC 3339 date-time with a time zone, such as 2027-01-31T12:00:00Z' }
  if (at.getTime() <= nowMs) return { error: 'must be in the future' }
  const latest = new Date(nowMs)
  latest.setUTCFullYear(latest.getUTCFullYear() + MAX_EXPIRY_YEARS)
  if (at.getTime() > latest.getTime()) return { error: `must be at most ${MAX_EXPIRY_YEARS} years ahead` }
  return { at }
}
