// The portal's two credentials (docs/decisions/0192-two-credentials-both-made-like-api-keys.md):
// the one-time link token that a parent hands its customer in the portal URL's fragment, and the
// session credential the page gets for it. Both are made like API keys (key-format.ts): a prefix,
// 32 random bytes in base62 and a CRC32 checksum, so that a mistyped or made-up one is refused
// without asking the store and secret scanners recognise a leaked one; only their SHA-256 digests
// are stored.
import { digest, generate, withChecksum } from './key-format.js'

/** The link's one-time token: in the URL's fragment only, which browsers never send. */
export const LINK_TOKEN_PREFIX = 'tgwpl_'
/** The session's credential: the cookie's value, or the embedded page's bearer. */
export const SESSION_PREFIX = 'tgwps_'

const LINK_TOKEN_SHAPE = /^tgwpl_[0-9A-Za-z]{49}$/
const SESSION_SHAPE = /^tgwps_[0-9A-Za-z]{49}$/

const checksumHolds = (value: string) => withChecksum(value.slice(0, -6)) === value

export function generateLinkToken(): { token: string; tokenDigest: Buffer } {
  const token = generate(LINK_TOKEN_PREFIX)
  return { token, tokenDigest: digest(token) }
}

export function generateSessionSecret(): { secret: string; secretDigest: Buffer } {
  const secret = generate(SESSION_PREFIX)
  return { secret, secretDigest: digest(secret) }
}

export const isWellFormedLinkToken = (value: string) => LINK_TOKEN_SHAPE.test(value) && checksumHolds(value)
export const isWellFormedSessionSecret = (value: string) => SESSION_SHAPE.test(value) && checksumHolds(value)

export { digest }
