// Authentication (docs/api.md): the Bearer key is checked for shape and checksum before any store
// is asked, then looked up by its SHA-256 digest. A value in another format may be a key imported
// from elsewhere (docs/key-imports.md): looked up by its SHA-256 digest too, through the same
// cache and paced lookups as a made-up `tgw_` key, so that a flood of either costs Postgres alike.
import type { ApiError } from '../errors.js'
import type { TenancyLookups } from '../shared/tenancy-records.js'
import { type AccessTokens, looksLikeAccessToken } from './access-tokens.js'
import { type Principal, principalOfKey, unauthenticated } from './principal.js'
import { digest, isForeignKey, isWellFormedKey, KEY_PREFIX, malformedKeyReason, SECRET_PREFIX } from './key-format.js'

/** Extracts the key from `Authorization: Bearer <key>` (the scheme is case-insensitive). */
export function bearerToken(authorization: string | undefined): string | null {
  if (authorization === undefined) return null
  const match = /^bearer +(\S+) *$/i.exec(authorization)
  return match ? match[1]! : null
}

/**
 * One word with a key's or a secret's prefix: a key sent without `Bearer ` before it (RFC 9110
 * §11.4). A lone scheme name (`Basic`, `Bearer`) is not told it lacks one.
 */
function isBareCredential(authorization: string): boolean {
  const value = authorization.trim()
  return /^tgws?_/.test(value) && !/\s/.test(value)
}

/** What to send instead, told to a caller who sent something else (docs/api.md). */
const WHAT_TO_SEND =
  'send the API key as `Authorization: Bearer tgw_…`; to use a key id and client secret, trade them at POST /oauth2/token for an access token'

// Registered schemes (IANA's HTTP Authentication Scheme Registry), named even when sent alone.
const KNOWN_SCHEMES = new Set(['basic', 'bearer', 'digest', 'dpop', 'hoba', 'mutual', 'negotiate', 'oauth'])

/**
 * The scheme of a header that is not `Bearer <one word>`: the word before the credentials, or a
 * registered scheme sent alone. A lone word of another kind may be a credential: never echoed.
 */
function schemeOf(authorization: string): string | undefined {
  const match = /^\s*([!#$%&'*+.^_`|~0-9A-Za-z-]{1,32})(\s+\S)?/.exec(authorization)
  if (match === null) return undefined
  return match[2] !== undefined || KNOWN_SCHEMES.has(match[1]!.toLowerCase()) ? match[1] : undefined
}

/** The 401's detail for a Bearer value that is no key: what is wrong with it, then what to do. */
const malformedKey = (reason: string) => `the API key is malformed: ${reason}; copy the whole key, as it was shown once`

/** A scheme other than Bearer (`Basic`, in any case): named, never its credentials. */
function notBearer(authorization: string): ApiError {
  const scheme = schemeOf(authorization)
  // `Bearer` with no key, or with more than one word, is a malformed key, not another scheme.
  if (scheme?.toLowerCase() === 'bearer') return unauthenticated(malformedKey('send one key after Bearer'))
  const received = scheme === undefined ? 'is not Bearer' : `is ${scheme}, not Bearer`
  return unauthenticated(`the Authorization scheme ${received}: ${WHAT_TO_SEND}`)
}

/** A client secret (`tgws_…`) where a key goes: it is only for the token endpoint. */
function clientSecretSent(): ApiError {
  return unauthenticated(`a client secret (tgws_…) is not an API key: ${WHAT_TO_SEND}`)
}

/**
 * Finds the key's record and its tenant. `occurrences` is how many Authorization headers were
 * sent: Node keeps only the first, so a second one would otherwise pass unseen. An access token
 * (a JWT, not a key) goes to `tokens` (docs/credentials.md).
 */
export async function authenticate(
  authorization: string | undefined,
  lookups: TenancyLookups,
  occurrences = 1,
  tokens?: AccessTokens,
): Promise<Principal> {
  if (occurrences > 1) throw unauthenticated('send one Authorization header')
  if (authorization === undefined || authorization === '')
    throw unauthenticated('an API key is required: Authorization: Bearer <key>')
  const token = bearerToken(authorization)
  if (token === null && isBareCredential(authorization)) {
    if (authorization.trim().startsWith(SECRET_PREFIX)) throw clientSecretSent()
    throw unauthenticated('the Authorization header has no scheme: send Authorization: Bearer <key>')
  }
  if (token !== null && tokens !== undefined && looksLikeAccessToken(token)) return tokens.authenticate(token, lookups)
  if (token === null) throw notBearer(authorization)
  if (!isWellFormedKey(token) && !isForeignKey(token))
    throw token.startsWith(SECRET_PREFIX)
      ? clientSecretSent()
      : unauthenticated(malformedKey(malformedKeyReason(token)))
  const key = await lookups.keyByDigest(digest(token))
  // Said of the value's format only, never of what the store holds: a mistyped gateway key (its
  // prefix left out) is told what a gateway key looks like.
  if (key === null && !token.startsWith(KEY_PREFIX))
    throw unauthenticated(`the API key is unknown or revoked; a key the gateway made starts with ${KEY_PREFIX}`)
  return principalOfKey(key, lookups)
}
