// The signing keys a replica holds (docs/credentials.md): the one that signs now, the next one
// (published before it signs), and retired ones kept for verification until what they signed has
// expired. Access tokens and identity assertions are signed and verified here, with `jose`; where
// the keys come from (Postgres, rotation) is signing-key-store.ts's business, which hands them
// over with `replace`.
import { ApiError } from '../errors.js'
import {
  calculateJwkThumbprint,
  exportJWK,
  generateKeyPair,
  importJWK,
  jwtVerify,
  SignJWT,
  type CryptoKey,
  type JWK,
  type JWTPayload,
  type JWTVerifyResult,
} from 'jose'

export const SIGNING_ALGORITHM = 'ES256'

export interface SigningKey {
  /** RFC 7638 thumbprint of the public key. */
  readonly kid: string
  /** Null for a key that may no longer sign (retired, or known only by its public part). */
  readonly privateKey: CryptoKey | null
  /** The public key as published: kty, crv, x, y, plus kid, alg and use. */
  readonly publicJwk: JWK
  /** Signs from this instant (ms since the epoch). */
  readonly activatesAt: number
  /** Published (and so accepted) until this instant; null while nothing has ended it. */
  readonly publishedUntil: number | null
}

export interface SignOptions {
  /** The JOSE header's `typ` (`at+jwt` for access tokens, `JWT` for identity assertions). */
  typ: string
  ttlSeconds: number
  /** Seconds since the epoch, a fraction allowed (it picks the key); default now. `iat` is its whole part. */
  now?: number
}

export interface Signed {
  token: string
  kid: string
  /** `exp`, in seconds since the epoch. */
  expiresAt: number
}

export interface VerifyOptions {
  typ: string
  issuer: string
  audience: string
  clockToleranceSeconds: number
  requiredClaims?: string[]
}

export type Verified = JWTVerifyResult & { kid: string }

interface HeldKey {
  key: SigningKey
  verifyKey: CryptoKey
}

/** Makes a fresh ES256 pair, its private part extractable so that it can be stored (encrypted). */
export async function generateSigningKey(activatesAt: number): Promise<SigningKey> {
  const { privateKey, publicKey } = await generateKeyPair(SIGNING_ALGORITHM, { extractable: true })
  const jwk = await exportJWK(publicKey)
  const kid = await calculateJwkThumbprint(jwk)
  return {
    kid,
    privateKey,
    publicJwk: { ...jwk, kid, alg: SIGNING_ALGORITHM, use: 'sig' },
    activatesAt,
    publishedUntil: null,
  }
}

export interface KeyringOptions {
  /** What "now" is, in ms since the epoch (default Date.now); tests move it to try rotations. */
  clock?: () => number
}

export class Keyring {
  private held = new Map<string, HeldKey>()
  private listeners: (() => void)[] = []
  /** Moves whenever the set of keys changes: caches of signed or verified tokens key on it. */
  version = 0
  readonly clock: () => number

  constructor(options: KeyringOptions = {}) {
    this.clock = options.clock ?? Date.now
  }

  /** One key that signs from now and is never stored: for tests and tools that need no persistence. */
  static async ephemeral(): Promise<Keyring> {
    const keyring = new Keyring()
    await keyring.replace([await generateSigningKey(0)])
    return keyring
  }

  /** Replaces every key at once (after a load or a rotation); listeners hear of it. */
  async replace(keys: readonly SigningKey[]): Promise<void> {
    const held = new Map<string, HeldKey>()
    for (const key of keys) {
      held.set(key.kid, { key, verifyKey: (await importJWK(key.publicJwk, SIGNING_ALGORITHM)) as CryptoKey })
    }
    this.held = held
    this.version++
    for (const listener of this.listeners) listener()
  }

  /** Called after every `replace` (a rotation): drop what was signed or verified with the old set. */
  onChange(listener: () => void): void {
    this.listeners.push(listener)
  }

  keys(): SigningKey[] {
    return [...this.held.values()].map((h) => h.key)
  }

  /** The key that signs at `nowMs`: the latest activated one that still has its private part. */
  signingKey(nowMs = this.clock()): SigningKey {
    let best: SigningKey | null = null
    for (const { key } of this.held.values()) {
      if (key.privateKey === null || key.activatesAt > nowMs || !isPublished(key, nowMs)) continue
      if (best === null || key.activatesAt > best.activatesAt) best = key
    }
    // Only before the first load from the store succeeded (Postgres down at start): 503, not 500.
    if (best === null)
      throw new ApiError('store_unavailable', 'no signing key is loaded yet (the store cannot be reached); try again')
    return best
  }

  /** True while tokens signed by `kid` may be accepted (it is published). */
  accepts(kid: string, nowMs = this.clock()): boolean {
    const held = this.held.get(kid)
    return held !== undefined && isPublished(held.key, nowMs)
  }

  async sign(claims: JWTPayload, options: SignOptions): Promise<Signed> {
    // The key of this very instant (a key activated at 12.5 s signs from 12.5 s, and a rotation
    // that withdraws the old key at once leaves no second without one), whatever instant the
    // claims are dated: `now` only dates them.
    const key = this.signingKey()
    const issuedAt = Math.floor(options.now ?? this.clock() / 1000)
    const expiresAt = issuedAt + options.ttlSeconds
    const token = await new SignJWT(claims)
      .setProtectedHeader({ typ: options.typ, alg: SIGNING_ALGORITHM, kid: key.kid })
      .setIssuedAt(issuedAt)
      .setExpirationTime(expiresAt)
      .sign(key.privateKey!)
    return { token, kid: key.kid, expiresAt }
  }

  /** Checks signature, `typ`, `iss`, `aud` and the times; throws a JOSEError when any fails. */
  async verify(token: string, options: VerifyOptions): Promise<Verified> {
    let kid = ''
    const nowMs = this.clock()
    const result = await jwtVerify(
      token,
      (header) => {
        const held = header.kid === undefined ? undefined : this.held.get(header.kid)
        if (held === undefined || !isPublished(held.key, nowMs)) throw new UnknownKeyError()
        kid = held.key.kid
        return held.verifyKey
      },
      {
        algorithms: [SIGNING_ALGORITHM],
        typ: options.typ,
        issuer: options.issuer,
        audience: options.audience,
        clockTolerance: options.clockToleranceSeconds,
        currentDate: new Date(nowMs),
        requiredClaims: ['exp', 'iat', ...(options.requiredClaims ?? [])],
      },
    )
    return { ...result, kid }
  }

  /** The JSON Web Key Set: every published key (next, active, retired), public parts only. */
  jwks(nowMs = this.clock()): { keys: JWK[] } {
    const keys = [...this.held.values()]
      .map((h) => h.key)
      .filter((key) => isPublished(key, nowMs))
      .sort((a, b) => b.activatesAt - a.activatesAt)
      .map((key) => ({ ...key.publicJwk }))
    return { keys }
  }
}

function isPublished(key: SigningKey, nowMs: number): boolean {
  return key.publishedUntil === null || key.publishedUntil > nowMs
}

/** A token names a key this replica does not publish (unknown, withdrawn or past its time). */
export class UnknownKeyError extends Error {
  constructor() {
    super('the token names no published signing key')
    this.name = 'UnknownKeyError'
  }
}
