// The signing keys in Postgres (docs/credentials.md, Signing keys): made, rotated and withdrawn
// under an advisory lock, their private parts sealed under ENCRYPTION_KEY (PKCS #8, then
// AES-256-GCM bound to the kid). What the keyring holds is made here from what is stored.
import { exportPKCS8, importPKCS8, type CryptoKey, type JWK } from 'jose'
import type { Sql, Tx } from '../store/db.js'
import {
  endPublicationBefore,
  insertSigningKey,
  lockSigningKeys,
  newestSigningKey,
  publishedSigningKeys,
  tryLockSigningKeys,
  withdrawSigningKeys,
  type SigningKeyRow,
} from '../store/signing-keys.js'
import { open, seal } from '../encryption/seal.js'
import { generateSigningKey, SIGNING_ALGORITHM, type SigningKey } from './keyring.js'
import {
  NEXT_KEY_LEAD_MS,
  RETIRED_KEY_GRACE_MS,
  rotationDue,
  signerOf,
  statusOf,
  type SigningKeyStatus,
} from './schedule.js'
import { inTransaction } from '../store/transaction.js'

/** What WrongEncryptionKeyError says did not open. */
const SEALED = 'the signing keys stored in the database'

/** A signing key as stored; instants in ms since the epoch. */
export interface StoredSigningKey {
  readonly kid: string
  readonly publicJwk: JWK
  readonly sealedPrivateKey: Buffer
  readonly createdAt: number
  readonly activatesAt: number
  readonly publishedUntil: number | null
  readonly withdrawnAt: number | null
}

/** A signing key as the CLI prints it. */
export interface ShownSigningKey {
  kid: string
  status: SigningKeyStatus
  created_at: string
  activates_at: string
  published_until: string | null
}

const millis = (date: Date | null): number | null => (date === null ? null : date.getTime())
const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString())

function fromRow(row: SigningKeyRow): StoredSigningKey {
  return {
    kid: row.kid,
    publicJwk: row.public_jwk,
    sealedPrivateKey: Buffer.from(row.private_key),
    createdAt: row.created_at.getTime(),
    activatesAt: row.activates_at.getTime(),
    publishedUntil: millis(row.published_until),
    withdrawnAt: millis(row.withdrawn_at),
  }
}

export interface SigningKeyStoreOptions {
  sql: Sql
  /** ENCRYPTION_KEY (32 bytes). */
  encryptionKey: Buffer
  /** What "now" is (default Date.now); tests move it. */
  clock?: () => number
}

export class SigningKeyStore {
  readonly clock: () => number
  private readonly sql: Sql
  private readonly encryptionKey: Buffer

  constructor(options: SigningKeyStoreOptions) {
    this.sql = options.sql
    this.encryptionKey = options.encryptionKey
    this.clock = options.clock ?? Date.now
  }

  /** The keys published now: next, active and retired ones, oldest first. */
  async published(db: Sql | Tx = this.sql): Promise<StoredSigningKey[]> {
    return (await publishedSigningKeys(db, new Date(this.clock()))).map(fromRow)
  }

  /**
   * What the keyring holds of `stored`: every public part, and the private parts of the key that
   * signs now and of those after it, opened here or taken from `held` (the keyring's, by kid).
   * Throws WrongEncryptionKeyError when ENCRYPTION_KEY is not the key they were sealed under.
   */
  async unseal(
    stored: readonly StoredSigningKey[],
    held: (kid: string) => CryptoKey | null = () => null,
  ): Promise<SigningKey[]> {
    const signer = signerOf(stored, this.clock())
    return Promise.all(
      stored.map(async (key) => {
        const signs = signer === null || key.activatesAt >= signer.activatesAt
        return {
          kid: key.kid,
          privateKey: signs ? (held(key.kid) ?? (await this.openPrivateKey(key))) : null,
          publicJwk: key.publicJwk,
          activatesAt: key.activatesAt,
          publishedUntil: key.publishedUntil,
        }
      }),
    )
  }

  private async openPrivateKey(key: Pick<StoredSigningKey, 'kid' | 'sealedPrivateKey'>): Promise<CryptoKey> {
    const pkcs8 = open(this.encryptionKey, key.sealedPrivateKey, key.kid, SEALED).toString('utf8')
    return importPKCS8(pkcs8, SIGNING_ALGORITHM)
  }

  /**
   * First start: when no key is published, makes one that signs at once, under the lock, so that
   * of replicas starting together one makes it and the others load it. Returns it, or null.
   */
  async ensureSigningKey(): Promise<StoredSigningKey | null> {
    return inTransaction(this.sql, async (tx) => {
      await lockSigningKeys(tx)
      if ((await this.published(tx)).length > 0) return null
      await this.checkEncryptionKey(tx)
      const now = this.clock()
      return this.insertKey(tx, now, now)
    })
  }

  /**
   * The automatic rotation, by whichever replica takes the lock first (the others skip): a next
   * key when the one that signs has done so for `periodMs` less the lead. Returns it, or null.
   */
  async rotateIfDue(periodMs: number): Promise<StoredSigningKey | null> {
    return inTransaction(this.sql, async (tx) => {
      if (!(await tryLockSigningKeys(tx))) return null
      const now = this.clock()
      const activatesAt = rotationDue(await this.published(tx), now, periodMs)
      if (activatesAt === null) return null
      await this.checkEncryptionKey(tx)
      return this.insertKey(tx, activatesAt, now)
    })
  }

  /**
   * `signing-keys rotate`: a next key, published now, that signs after the lead. On a database
   * with no key yet it signs at once: no verifier can have kept an older JWKS.
   */
  async rotate(): Promise<ShownSigningKey> {
    return inTransaction(this.sql, async (tx) => {
      await lockSigningKeys(tx)
      await this.checkEncryptionKey(tx)
      const now = this.clock()
      const published = await this.published(tx)
      const created = await this.insertKey(tx, signerOf(published, now) === null ? now : now + NEXT_KEY_LEAD_MS, now)
      return this.show(created, [...published, created], now)
    })
  }

  /**
   * `signing-keys rotate --compromised`: withdraws the key that signs and any next one (made and
   * kept alike, so no safer), and makes a fresh one that signs at once. Retired keys stay: they
   * sign nothing any more, and what they signed expires on its own.
   */
  async rotateCompromised(): Promise<{ signing_key: ShownSigningKey; withdrawn: ShownWithdrawn[] }> {
    return inTransaction(this.sql, async (tx) => {
      await lockSigningKeys(tx)
      await this.checkEncryptionKey(tx)
      const now = this.clock()
      const published = await this.published(tx)
      // Every published key, retired ones too: whoever holds a retired key's private part could
      // sign new tokens dated within its publication, and a leak may be of any key the table holds.
      const withdrawn = await withdrawSigningKeys(
        tx,
        published.map((key) => key.kid),
        new Date(now),
      )
      const created = await this.insertKey(tx, now, now)
      return {
        signing_key: this.show(created, [created], now),
        withdrawn: withdrawn
          .map(fromRow)
          .sort((x, y) => x.activatesAt - y.activatesAt)
          .map((key) => ({ kid: key.kid, withdrawn_at: iso(key.withdrawnAt)! })),
      }
    })
  }

  /** Before a key is added: ENCRYPTION_KEY must open the newest one, or replicas could not load it. */
  private async checkEncryptionKey(tx: Tx): Promise<void> {
    const newest = await newestSigningKey(tx)
    if (newest !== null) await this.openPrivateKey(fromRow(newest))
  }

  /**
   * Makes a key at `now` that signs from `at`; the keys before it stay published until what they
   * signed has expired. `now` is the caller's, the instant `at` was chosen from: a second reading
   * of the clock would date the key later, and a next key would sign less than the lead after it.
   */
  private async insertKey(tx: Tx, at: number, now: number): Promise<StoredSigningKey> {
    // Whole seconds, as a token's times are: down for a key that signs at once (so that it does
    // in the second it is made), up for a later one (so that it never signs early).
    const activatesAt = at <= now ? Math.floor(at / 1000) * 1000 : Math.ceil(at / 1000) * 1000
    const key = await generateSigningKey(activatesAt)
    const pkcs8 = await exportPKCS8(key.privateKey!)
    const row = await insertSigningKey(tx, {
      kid: key.kid,
      publicJwk: key.publicJwk,
      sealedPrivateKey: seal(this.encryptionKey, Buffer.from(pkcs8, 'utf8'), key.kid),
      createdAt: new Date(now),
      activatesAt: new Date(activatesAt),
    })
    await endPublicationBefore(tx, new Date(activatesAt), new Date(activatesAt + RETIRED_KEY_GRACE_MS))
    return fromRow(row)
  }

  private show(key: StoredSigningKey, published: readonly StoredSigningKey[], now: number): ShownSigningKey {
    return {
      kid: key.kid,
      status: statusOf(key, published, now),
      created_at: iso(key.createdAt)!,
      activates_at: iso(key.activatesAt)!,
      published_until: iso(key.publishedUntil),
    }
  }
}

export interface ShownWithdrawn {
  kid: string
  withdrawn_at: string
}
