// Secrets at rest (src/encryption/seal.ts): AES-256-GCM, a fresh IV per value, and a wrong
// key or an altered value refused by the tag, with a message that names ENCRYPTION_KEY.
import { randomBytes } from 'node:crypto'
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { ConfigError } from '../../src/config.js'
import { MalformedSealedValueError, open, seal, WrongEncryptionKeyError } from '../../src/encryption/seal.js'
import { ENCRYPTION_KEY_FILE, resolveEncryptionKey } from '../../src/encryption/key.js'

const key = randomBytes(32)
const secret = Buffer.from('-----BEGIN PRIVATE KEY-----\nnot really\n-----END PRIVATE KEY-----\n')
const WHAT = 'the signing keys stored in the database'

t.test('a sealed value opens under its key and associated data', async (t) => {
  const sealed = seal(key, secret, 'kid-1')
  t.same(open(key, sealed, 'kid-1', WHAT), secret)
  t.equal(sealed[0], 1, 'layout version 1')
  t.equal(sealed.length, 1 + 12 + 16 + secret.length, 'version, IV, tag, then the ciphertext')
  t.notOk(sealed.includes(Buffer.from('not really')), 'the plaintext is not in it')
})

t.test('each seal draws a fresh IV', async (t) => {
  const a = seal(key, secret, 'kid-1')
  const b = seal(key, secret, 'kid-1')
  t.not(a.subarray(1, 13).toString('hex'), b.subarray(1, 13).toString('hex'))
  t.not(a.toString('hex'), b.toString('hex'))
})

t.test('another key does not open it: a clear error naming ENCRYPTION_KEY', async (t) => {
  const sealed = seal(key, secret, 'kid-1')
  t.throws(() => open(randomBytes(32), sealed, 'kid-1', WHAT), WrongEncryptionKeyError)
  try {
    open(randomBytes(32), sealed, 'kid-1', WHAT)
  } catch (err) {
    const message = (err as Error).message
    t.match(message, /^ENCRYPTION_KEY does not decrypt the signing keys stored in the database/)
    t.notMatch(message, /\n/, 'one line')
  }
})

t.test('an altered value, or one moved to another kid, does not open', async (t) => {
  const sealed = seal(key, secret, 'kid-1')
  for (const at of [1, 13, 29, sealed.length - 1]) {
    const altered = Buffer.from(sealed)
    altered[at]! ^= 0x01
    t.throws(() => open(key, altered, 'kid-1', WHAT), WrongEncryptionKeyError, `byte ${at} changed`)
  }
  t.throws(() => open(key, sealed, 'kid-2', WHAT), WrongEncryptionKeyError, 'associated data of another key')
})

t.test('a value of another layout or too short is malformed, not a wrong key', async (t) => {
  const sealed = seal(key, secret, 'kid-1')
  const version2 = Buffer.from(sealed)
  version2[0] = 2
  t.throws(() => open(key, version2, 'kid-1', WHAT), MalformedSealedValueError)
  t.throws(() => open(key, sealed.subarray(0, 28), 'kid-1', WHAT), MalformedSealedValueError)
  t.throws(() => seal(randomBytes(16), secret, 'kid-1'), /32 bytes/, 'a key of another size is a bug')
})

t.test('ENCRYPTION_KEY: required with DATABASE_URL, else DATA_DIR/encryption.key', async (t) => {
  const dataDir = join(t.testdir({}), 'data')
  const given = randomBytes(32)
  t.same(resolveEncryptionKey({ encryptionKey: given, databaseUrl: 'postgres://x/y', dataDir }), given)
  t.throws(() => resolveEncryptionKey({ encryptionKey: undefined, databaseUrl: 'postgres://x/y', dataDir }), {
    name: 'ConfigError',
    message: /^invalid configuration: ENCRYPTION_KEY is required with DATABASE_URL/,
  })

  const made = resolveEncryptionKey({ encryptionKey: undefined, databaseUrl: undefined, dataDir })
  const path = join(dataDir, ENCRYPTION_KEY_FILE)
  t.equal(made.length, 32)
  t.equal(statSync(path).mode & 0o777, 0o600, 'readable by its owner only')
  t.equal(readFileSync(path, 'utf8'), `${made.toString('base64')}\n`)
  t.same(resolveEncryptionKey({ encryptionKey: undefined, databaseUrl: undefined, dataDir }), made, 'kept')

  t.same(readdirSync(dataDir), [ENCRYPTION_KEY_FILE], 'no partial file left beside it')

  writeFileSync(path, 'not a key\n')
  t.throws(() => resolveEncryptionKey({ encryptionKey: undefined, databaseUrl: undefined, dataDir }), ConfigError)
})
