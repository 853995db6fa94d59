// Where ENCRYPTION_KEY comes from (docs/configuration.md): the variable; with DATABASE_URL nothing
// else will do, since every replica and the CLI must hold the same key. The embedded database
// (one process, one machine) keeps its own in DATA_DIR/encryption.key, made on its first start.
import { randomBytes } from 'node:crypto'
import { closeSync, fsyncSync, linkSync, mkdirSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import { ConfigError } from '../config-readers.js'
import { ENCRYPTION_KEY_BYTES } from './seal.js'

export const ENCRYPTION_KEY_FILE = 'encryption.key'

/**
 * The key that seals the signing keys. Throws a ConfigError naming ENCRYPTION_KEY when
 * DATABASE_URL is set without it, or when the embedded key file holds something else than a key.
 */
export function resolveEncryptionKey(config: {
  readonly encryptionKey: Buffer | undefined
  readonly databaseUrl: string | undefined
  readonly dataDir: string
}): Buffer {
  if (config.encryptionKey !== undefined) return config.encryptionKey
  if (config.databaseUrl !== undefined)
    throw new ConfigError(
      'ENCRYPTION_KEY',
      'is required with DATABASE_URL: 32 random bytes in base64 (openssl rand -base64 32), the same for every replica and the CLI',
    )
  return embeddedEncryptionKey(config.dataDir)
}

/** DATA_DIR/encryption.key: read, or made once (0600, 32 random bytes in base64). */
function embeddedEncryptionKey(dataDir: string): Buffer {
  const path = join(dataDir, ENCRYPTION_KEY_FILE)
  try {
    return readKeyFile(path)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
  }
  mkdirSync(dataDir, { recursive: true })
  const key = randomBytes(ENCRYPTION_KEY_BYTES)
  // Written whole to a file of its own, then linked into place: a crash midway leaves no empty
  // key file to block every later start, and the link (like wx) never replaces one. Callers hold
  // the embedded database's lock, so one process at a time gets here.
  const partial = `${path}.${process.pid}.partial`
  const fd = openSync(partial, 'wx', 0o600)
  try {
    writeSync(fd, `${key.toString('base64')}\n`)
    fsyncSync(fd)
  } finally {
    closeSync(fd)
  }
  try {
    linkSync(partial, path)
  } finally {
    rmSync(partial, { force: true })
  }
  return key
}

function readKeyFile(path: string): Buffer {
  const text = readFileSync(path, 'utf8').trim()
  const key = /^[A-Za-z0-9+/]+={0,2}$/.test(text) ? Buffer.from(text, 'base64') : Buffer.alloc(0)
  if (key.length !== ENCRYPTION_KEY_BYTES)
    throw new ConfigError('ENCRYPTION_KEY', `is unset and ${path} does not hold 32 bytes in base64`)
  return key
}
