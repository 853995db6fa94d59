// API key and client secret format (docs/api.md):
//   tgw_  + 43 base62 characters (32 random bytes) + 6 base62 characters of checksum
//   tgws_ + the same, for client secrets
// The checksum (CRC32 of everything before it, as GitHub's tokens do) lets us refuse a mistyped
// or made-up key without asking any store, and lets secret scanners recognise leaked keys.
// Only SHA-256 digests are ever stored.
import { hash, randomBytes } from 'node:crypto'
import { crc32 } from 'node:zlib'

export const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'
const BODY_LENGTH = 43 // ceil(256 / log2(62))
const CHECKSUM_LENGTH = 6 // 62^6 > 2^32

export const KEY_PREFIX = 'tgw_'
export const SECRET_PREFIX = 'tgws_'
/** How many leading characters of a key are kept in clear to help people tell keys apart. */
const DISPLAY_PREFIX_LENGTH = KEY_PREFIX.length + 8

function base62(value: bigint, width: number): string {
  let out = ''
  while (value > 0n) {
    out = BASE62[Number(value % 62n)] + out
    value /= 62n
  }
  return out.padStart(width, '0')
}

/** Base62 of the CRC32, in plain numbers: this runs on every request. */
function checksum(text: string): string {
  let value = crc32(text)
  let out = ''
  for (let i = 0; i < CHECKSUM_LENGTH; i++) {
    out = BASE62[value % 62] + out
    value = Math.floor(value / 62)
  }
  return out
}

/** `text` followed by its checksum: a key or secret is its prefix and body, so completed. */
export function withChecksum(text: string): string {
  return text + checksum(text)
}

/** A prefix, 32 random bytes in base62 and a checksum: keys, client secrets, portal credentials. */
export function generate(prefix: string): string {
  return withChecksum(prefix + base62(BigInt(`0x${randomBytes(32).toString('hex')}`), BODY_LENGTH))
}

const KEY_SHAPE = /^tgw_[0-9A-Za-z]{49}$/
const SECRET_SHAPE = /^tgws_[0-9A-Za-z]{49}$/

function hasValidChecksum(value: string): boolean {
  const split = value.length - CHECKSUM_LENGTH
  return checksum(value.slice(0, split)) === value.slice(split)
}

/** True when `value` has the shape and checksum of an API key. Touches no store. */
export function isWellFormedKey(value: string): boolean {
  return KEY_SHAPE.test(value) && hasValidChecksum(value)
}

/**
 * Why `value` is not a well-formed API key, as a 401 says it (docs/api.md, Authentication): its
 * prefix, its length, a character no key has, or its checksum (a character mistyped). The key
 * itself is never repeated. Only for a value `isWellFormedKey` refused.
 */
export function malformedKeyReason(value: string): string {
  if (!value.startsWith(KEY_PREFIX)) return `an API key starts with ${KEY_PREFIX}`
  const length = value.length - KEY_PREFIX.length
  const whole = BODY_LENGTH + CHECKSUM_LENGTH
  if (length !== whole) return `an API key has ${whole} characters after ${KEY_PREFIX}, this one ${length}`
  if (!KEY_SHAPE.test(value)) return `an API key has only letters and digits after ${KEY_PREFIX}`
  return `its checksum (the last ${CHECKSUM_LENGTH} characters) does not match the rest: a character is mistyped`
}

/**
 * A key brought over from elsewhere (docs/key-imports.md): 16 to 256 printable ASCII characters
 * without spaces, in any format. A Bearer value of this shape that is not a gateway key's is looked
 * up as one, through the same paced lookups as a made-up `tgw_` key (store/key-lookup-batcher.ts).
 */
export const FOREIGN_KEY_SHAPE = /^[\x21-\x7e]{16,256}$/

/** The gateway's own prefixes (`tgw_`, `tgws_`, the portal's `tgwpl_` and `tgwps_`): never a foreign key's. */
const GATEWAY_PREFIX = /^tgw[a-z]*_/

/** True when `value` may be an imported key: the shape above, without a gateway prefix. */
export function isForeignKey(value: string): boolean {
  return FOREIGN_KEY_SHAPE.test(value) && !GATEWAY_PREFIX.test(value)
}

/** How many leading characters of an imported key are kept in clear, when its value was given. */
export const IMPORTED_PREFIX_LENGTH = 4

export function isWellFormedSecret(value: string): boolean {
  return SECRET_SHAPE.test(value) && hasValidChecksum(value)
}

export function digest(value: string): Buffer {
  return hash('sha256', value, 'buffer')
}

export interface GeneratedKey {
  apiKey: string
  prefix: string
  keyDigest: Buffer
}

export function generateApiKey(): GeneratedKey {
  const apiKey = generate(KEY_PREFIX)
  return { apiKey, prefix: apiKey.slice(0, DISPLAY_PREFIX_LENGTH), keyDigest: digest(apiKey) }
}

export function generateClientSecret(): { clientSecret: string; secretDigest: Buffer } {
  const clientSecret = generate(SECRET_PREFIX)
  return { clientSecret, secretDigest: digest(clientSecret) }
}
