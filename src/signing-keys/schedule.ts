// When signing keys sign, rotate and leave the JWKS (docs/credentials.md, Signing keys), as plain
// functions of the keys' instants and the time.

/** A next key is published at least this long before it signs: longer than verifiers keep the JWKS (300 s). */
export const NEXT_KEY_LEAD_MS = 10 * 60_000

/** The longest life of what a key signs: an access token (ACCESS_TOKEN_TTL_SECONDS is at most 3600). */
export const MAX_ACCESS_TOKEN_TTL_SECONDS = 3600
/** An identity assertion lives at most this long (a route's identity.ttl_seconds). */
export const MAX_IDENTITY_TTL_SECONDS = 300
/** Verifiers accept an `exp` this far in the past. */
export const VERIFY_LEEWAY_SECONDS = 30

/**
 * A retired key stays published this long after its successor starts to sign: until everything
 * it signed has expired, leeway included.
 */
export const RETIRED_KEY_GRACE_MS =
  (Math.max(MAX_ACCESS_TOKEN_TTL_SECONDS, MAX_IDENTITY_TTL_SECONDS) + VERIFY_LEEWAY_SECONDS) * 1000

export const DAY_MS = 24 * 60 * 60_000

export interface ScheduledKey {
  readonly kid: string
  /** Signs from this instant (ms since the epoch). */
  readonly activatesAt: number
}

export type SigningKeyStatus = 'next' | 'active' | 'retired' | 'withdrawn'

/** The key that signs at `now` among published ones: the latest already activated. */
export function signerOf<K extends ScheduledKey>(keys: readonly K[], now: number): K | null {
  let signer: K | null = null
  for (const key of keys) {
    if (key.activatesAt <= now && (signer === null || key.activatesAt > signer.activatesAt)) signer = key
  }
  return signer
}

/**
 * When a new key should activate if the published `keys` are due for their automatic rotation at
 * `now`, else null. Due: nothing waits to sign yet, and the signer has signed for `periodMs` less
 * the lead. The new key signs when the period is over, and never less than the lead after it is
 * published (a replica that was down at the due time publishes late rather than sign unannounced).
 */
export function rotationDue(keys: readonly ScheduledKey[], now: number, periodMs: number): number | null {
  const signer = signerOf(keys, now)
  if (signer === null || keys.some((key) => key.activatesAt > now)) return null
  const scheduled = signer.activatesAt + periodMs
  if (now < scheduled - NEXT_KEY_LEAD_MS) return null
  return Math.max(scheduled, now + NEXT_KEY_LEAD_MS)
}

/** What a published key is at `now`, among the published `keys` (a withdrawn key is not among them). */
export function statusOf(key: ScheduledKey, keys: readonly ScheduledKey[], now: number): SigningKeyStatus {
  if (key.activatesAt > now) return 'next'
  return signerOf(keys, now)?.kid === key.kid ? 'active' : 'retired'
}
