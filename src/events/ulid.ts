// ULIDs (https://github.com/ulid/spec): 48 bits of milliseconds since the epoch and 80 random
// bits, in Crockford's base32, 26 characters that sort by time. Event ids are `evt_` + one.
import { randomBytes } from 'node:crypto'

const ALPHABET = '0123456789ABCDEFGHJKMNPQRSTVWXYZ'
const MAX_TIME = 2 ** 48 - 1

/** `bits` of `value` as base32 digits, most significant first (bits is a multiple of 5). */
function base32(value: bigint, digits: number): string {
  let text = ''
  for (let i = digits - 1; i >= 0; i--) text += ALPHABET[Number((value >> BigInt(i * 5)) & 31n)]
  return text
}

export function ulid(nowMs: number = Date.now(), random: Buffer = randomBytes(10)): string {
  if (!Number.isInteger(nowMs) || nowMs < 0 || nowMs > MAX_TIME) throw new RangeError(`not a ULID time: ${nowMs}`)
  if (random.length !== 10) throw new RangeError('a ULID takes 10 random bytes')
  return base32(BigInt(nowMs), 10) + base32(BigInt(`0x${random.toString('hex')}`), 16)
}

/** The milliseconds a ULID carries. */
export function ulidTime(id: string): number {
  let value = 0
  for (const char of id.slice(0, 10)) {
    const digit = ALPHABET.indexOf(char)
    if (digit === -1) throw new RangeError(`not a ULID: ${id}`)
    value = value * 32 + digit
  }
  return value
}

export const ULID_PATTERN = '^[0-7][0-9A-HJKMNP-TV-Z]{25}$'

export const eventId = (nowMs?: number): string => `evt_${ulid(nowMs)}`
