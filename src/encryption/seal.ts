// Secrets at rest (docs/credentials.md, Signing keys): sealed with AES-256-GCM under ENCRYPTION_KEY,
// by node:crypto. A sealed value is
//
//   version (1 byte, 1) | IV (12 random bytes) | GCM tag (16 bytes) | ciphertext
//
// and its associated data names what it belongs to (a signing key's kid), so that a value copied
// onto another row does not open. The version byte leaves room for another layout or algorithm.
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto'

const ALGORITHM = 'aes-256-gcm'
const VERSION = 1
const IV_BYTES = 12
const TAG_BYTES = 16
const HEADER_BYTES = 1 + IV_BYTES + TAG_BYTES
export const ENCRYPTION_KEY_BYTES = 32

/**
 * A sealed value did not open under this key: it was sealed under another ENCRYPTION_KEY (or
 * altered since). GCM cannot tell the two apart; the first is what happens in practice.
 */
export class WrongEncryptionKeyError extends Error {
  constructor(what: string) {
    super(
      `ENCRYPTION_KEY does not decrypt ${what}: they were encrypted under another ENCRYPTION_KEY (or altered); start with the ENCRYPTION_KEY they were made with`,
    )
    this.name = 'WrongEncryptionKeyError'
  }
}

/** A sealed value that is not one: too short, or of a layout this version does not know. */
export class MalformedSealedValueError extends Error {
  constructor(problem: string) {
    super(`a sealed value is malformed: ${problem}`)
    this.name = 'MalformedSealedValueError'
  }
}

function checkKey(key: Buffer): void {
  if (key.length !== ENCRYPTION_KEY_BYTES) throw new Error(`an encryption key has ${ENCRYPTION_KEY_BYTES} bytes`)
}

export function seal(key: Buffer, plaintext: Buffer, associatedData: string): Buffer {
  checkKey(key)
  const iv = randomBytes(IV_BYTES)
  const cipher = createCipheriv(ALGORITHM, key, iv, { authTagLength: TAG_BYTES })
  cipher.setAAD(Buffer.from(associatedData, 'utf8'))
  const ciphertext = Buffer.concat([cipher.update(plaintext), cipher.final()])
  return Buffer.concat([Buffer.from([VERSION]), iv, cipher.getAuthTag(), ciphertext])
}

/**
 * The plaintext of a sealed value. A wrong key (or an altered value) fails GCM's tag check and
 * throws WrongEncryptionKeyError, whose message says `what` did not open.
 */
export function open(key: Buffer, sealed: Buffer, associatedData: string, what: string): Buffer {
  checkKey(key)
  if (sealed.length < HEADER_BYTES) throw new MalformedSealedValueError(`${sealed.length} bytes`)
  if (sealed[0] !== VERSION) throw new MalformedSealedValueError(`unknown version ${sealed[0]}`)
  const iv = sealed.subarray(1, 1 + IV_BYTES)
  const tag = sealed.subarray(1 + IV_BYTES, HEADER_BYTES)
  const decipher = createDecipheriv(ALGORITHM, key, iv, { authTagLength: TAG_BYTES })
  decipher.setAAD(Buffer.from(associatedData, 'utf8'))
  decipher.setAuthTag(tag)
  const plaintext = decipher.update(sealed.subarray(HEADER_BYTES))
  try {
    return Buffer.concat([plaintext, decipher.final()])
  } catch {
    throw new WrongEncryptionKeyError(what)
  }
}
