// SQL of the signing keys (migrations/008_signing_keys.sql). Instants come from the caller's clock,
// not from Postgres's now(), so that what a replica computes (which key signs, which is due) and
// what it stores agree, and so that tests can move time.
import type { JWK } from 'jose'
import type { Sql, Tx } from './db.js'

type Db = Sql | Tx

export interface SigningKeyRow {
  kid: string
  public_jwk: JWK
  /** The sealed PKCS #8 private key (encryption/seal.ts). */
  private_key: Buffer
  created_at: Date
  activates_at: Date
  published_until: Date | null
  withdrawn_at: Date | null
}

export interface NewSigningKey {
  kid: string
  publicJwk: JWK
  sealedPrivateKey: Buffer
  createdAt: Date
  activatesAt: Date
}

// An arbitrary constant of this project, apart from the migrations' (store/migrate.ts).
const SIGNING_KEYS_LOCK_ID = 7_316_471_108

/** Waits for the signing keys' lock, held until the transaction ends (first key, CLI). */
export async function lockSigningKeys(tx: Tx): Promise<void> {
  await tx`select pg_advisory_xact_lock(${SIGNING_KEYS_LOCK_ID})`
}

/** Takes the lock if no one holds it (automatic rotation: one replica does it, the others skip). */
export async function tryLockSigningKeys(tx: Tx): Promise<boolean> {
  const [row] = await tx<{ locked: boolean }[]>`select pg_try_advisory_xact_lock(${SIGNING_KEYS_LOCK_ID}) as locked`
  return row!.locked
}

/** The keys published at `at` (not withdrawn, not past their time), oldest activation first. */
export async function publishedSigningKeys(db: Db, at: Date): Promise<SigningKeyRow[]> {
  return db<SigningKeyRow[]>`
    select kid, public_jwk, private_key, created_at, activates_at, published_until, withdrawn_at
    from signing_keys
    where withdrawn_at is null and (published_until is null or published_until > ${at})
    order by activates_at, created_at`
}

/** The most recently made key, whatever its state: what tells whether ENCRYPTION_KEY is the right one. */
export async function newestSigningKey(db: Db): Promise<SigningKeyRow | null> {
  const [row] = await db<SigningKeyRow[]>`
    select kid, public_jwk, private_key, created_at, activates_at, published_until, withdrawn_at
    from signing_keys order by created_at desc limit 1`
  return row ?? null
}

export async function insertSigningKey(tx: Tx, key: NewSigningKey): Promise<SigningKeyRow> {
  const [row] = await tx<SigningKeyRow[]>`
    insert into signing_keys (kid, public_jwk, private_key, created_at, activates_at)
    values (${key.kid}, ${tx.json(key.publicJwk as Parameters<Tx['json']>[0])}, ${key.sealedPrivateKey},
            ${key.createdAt}, ${key.activatesAt})
    returning kid, public_jwk, private_key, created_at, activates_at, published_until, withdrawn_at`
  return row!
}

/**
 * A key that activates at `successorActivatesAt` ends the publication of every key before it that
 * nothing has ended yet: they stay published until `until`.
 */
export async function endPublicationBefore(tx: Tx, successorActivatesAt: Date, until: Date): Promise<void> {
  await tx`
    update signing_keys set published_until = ${until}
    where withdrawn_at is null and published_until is null and activates_at < ${successorActivatesAt}`
}

/** Withdraws keys at once: no longer published, no longer accepted. */
export async function withdrawSigningKeys(tx: Tx, kids: readonly string[], at: Date): Promise<SigningKeyRow[]> {
  if (kids.length === 0) return []
  return tx<SigningKeyRow[]>`
    update signing_keys set withdrawn_at = ${at}, published_until = ${at}
    where kid in (select jsonb_array_elements_text(${tx.json(kids as string[])}))
    returning kid, public_jwk, private_key, created_at, activates_at, published_until, withdrawn_at`
}
