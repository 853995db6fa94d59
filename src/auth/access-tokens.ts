// Access tokens as credentials (docs/credentials.md): `Authorization: Bearer <JWT>` works wherever
// its key does, with the token's scopes. The signature, `typ`, `iss`, `aud` and times are checked
// once; a verified token is then remembered until it expires, so a repeated token costs no
// signature check. Its key is looked up by `sub` through the caches on every use (or every
// admission window), so that revoking or expiring the key, or deactivating its tenant, ends its
// tokens exactly as fast as it ends the key.
import { LRUCache } from 'lru-cache'
import type { Keyring } from '../signing-keys/keyring.js'
import type { Tally } from '../shared/fast-metrics.js'
import { UUID_PATTERN } from '../shared/identifiers.js'
import type { KeyRecord, TenancyLookups } from '../shared/tenancy-records.js'
import { type AccessTokenUse, type Principal, principalOfKey, unauthenticated } from './principal.js'
import { scopeCovers } from '../shared/scopes.js'

/** RFC 9068 §2.1: the JOSE header's `typ` of an access token. */
export const ACCESS_TOKEN_TYPE = 'at+jwt'
/** How far `exp`, `nbf` and `iat` may be off, for clocks that differ between replicas. */
export const ACCESS_TOKEN_LEEWAY_SECONDS = 30
/** ACCESS_TOKEN_TTL_SECONDS is at most this: a token claiming a longer life was not made here. */
export const MAX_ACCESS_TOKEN_TTL_SECONDS = 3600
/**
 * Longer values are refused before any parsing or cryptography. The largest token the gateway
 * issues (a key's 50 scopes of 100 characters each) is about 7.5 KiB.
 */
export const MAX_ACCESS_TOKEN_LENGTH = 8 * 1024

const JWS_COMPACT = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/
const KEY_ID = new RegExp(UUID_PATTERN)
/** Verified tokens remembered at once, by their total length (a typical one is under 1 KiB). */
const MAX_REMEMBERED_BYTES = 16 * 1024 * 1024

/** What a verified token grants, remembered until it expires. */
interface VerifiedToken {
  readonly kid: string
  readonly keyId: string
  readonly tenantId: string
  readonly scopes: readonly string[]
  /** exp plus the leeway, in ms: past it the token is refused. */
  readonly usableUntilMs: number
  /** exp, in ms: when the sockets opened with it close (proxy/websocket/socket-pair.ts). */
  readonly expiresAtMs: number
  /** The last key record the token was narrowed against, and the result: reused while the record is. */
  narrowed?: { from: KeyRecord; to: KeyRecord }
}

/** A Bearer value that is not an API key but has a JWT's three dot-separated parts: this module's. */
export function looksLikeAccessToken(value: string): boolean {
  const first = value.indexOf('.')
  return first > 0 && value.indexOf('.', first + 1) > first && !value.startsWith('tgw')
}

const INVALID = 'the access token is invalid or has expired'

export interface AccessTokensOptions {
  /** ISSUER_URL: both `iss` and `aud` of the gateway's tokens. */
  issuer: string
  /** Signature checks, by outcome (a remembered token costs none). */
  verifications: { valid: Tally; invalid: Tally }
}

export class AccessTokens {
  private readonly verified = new LRUCache<string, VerifiedToken>({
    maxSize: MAX_REMEMBERED_BYTES,
    sizeCalculation: (_value, token) => token.length + 256,
  })

  private readonly keyring: Keyring
  private readonly options: AccessTokensOptions
  constructor(keyring: Keyring, options: AccessTokensOptions) {
    this.keyring = keyring
    this.options = options
    // A new set of signing keys (a rotation, a withdrawal) may have ended some of them.
    keyring.onChange(() => this.verified.clear())
  }

  /** True while a principal from a token may be reused: before its expiry, its signing key still published. */
  stillUsable(use: AccessTokenUse, nowMs = Date.now()): boolean {
    return nowMs < use.usableUntilMs && this.keyring.accepts(use.kid, nowMs)
  }

  /** The verified token, from memory or by a signature check; throws 401 unauthenticated. */
  private async verify(token: string): Promise<VerifiedToken> {
    if (token.length > MAX_ACCESS_TOKEN_LENGTH) throw unauthenticated('the access token is too large')
    const now = Date.now()
    const known = this.verified.get(token)
    if (known !== undefined) {
      if (this.stillUsable(known, now)) return known
      this.verified.delete(token)
      throw unauthenticated(INVALID)
    }
    if (!JWS_COMPACT.test(token)) throw unauthenticated('the access token is malformed')
    const verified = await this.check(token, now)
    const ttl = verified.usableUntilMs - now
    if (ttl > 0) this.verified.set(token, verified, { ttl })
    return verified
  }

  /** One signature check with jose (through the keyring), and the claims this gateway puts in. */
  private async check(token: string, now: number): Promise<VerifiedToken> {
    const { valid, invalid } = this.options.verifications
    let result: Awaited<ReturnType<Keyring['verify']>>
    try {
      result = await this.keyring.verify(token, {
        typ: ACCESS_TOKEN_TYPE,
        issuer: this.options.issuer,
        audience: this.options.issuer,
        clockToleranceSeconds: ACCESS_TOKEN_LEEWAY_SECONDS,
        requiredClaims: ['sub', 'client_id', 'tenant_id', 'scope', 'jti'],
      })
    } catch {
      invalid.inc()
      throw unauthenticated(INVALID)
    }
    const { payload, kid } = result
    const { sub, client_id: clientId, tenant_id: tenantId, scope, iat, exp } = payload as Record<string, unknown>
    const nowSeconds = now / 1000
    // jose checks `iat` only against a maximum age: a token from the future, or one that claims a
    // longer life than any this gateway issues, was not made by a replica of it.
    if (
      typeof sub !== 'string' ||
      !KEY_ID.test(sub) ||
      clientId !== sub ||
      typeof tenantId !== 'string' ||
      typeof scope !== 'string' ||
      typeof iat !== 'number' ||
      typeof exp !== 'number' ||
      iat > nowSeconds + ACCESS_TOKEN_LEEWAY_SECONDS ||
      exp - iat > MAX_ACCESS_TOKEN_TTL_SECONDS
    ) {
      invalid.inc()
      throw unauthenticated(INVALID)
    }
    valid.inc()
    return {
      kid,
      keyId: sub.toLowerCase(),
      tenantId,
      scopes: scope === '' ? [] : scope.split(' '),
      usableUntilMs: (exp + ACCESS_TOKEN_LEEWAY_SECONDS) * 1000,
      expiresAtMs: exp * 1000,
    }
  }

  /**
   * The principal of an access token: its key, found by `sub` through the caches, answered exactly
   * as the key itself would be (unknown or revoked 401 `Bearer`, expired 401 key_expired), holding
   * the token's scopes. A deactivated tenant is left to the caller, as for a key (403
   * tenant_deactivated).
   */
  async authenticate(token: string, lookups: TenancyLookups): Promise<Principal> {
    const verified = await this.verify(token)
    const key = await lookups.keyById(verified.keyId)
    // A token whose tenant_id is not its key's was not made from this key: not a valid token.
    if (key !== null && key.tenantId !== verified.tenantId)
      throw unauthenticated('the access token was not issued to its key')
    const principal = await principalOfKey(key, lookups)
    return {
      key: narrowed(verified, principal.key),
      tenant: principal.tenant,
      accessToken: { kid: verified.kid, usableUntilMs: verified.usableUntilMs, expiresAtMs: verified.expiresAtMs },
    }
  }
}

/** The key as the token may use it: the token's scopes that one of the key's still covers. */
function narrowed(verified: VerifiedToken, key: KeyRecord): KeyRecord {
  if (verified.narrowed?.from === key) return verified.narrowed.to
  const scopes = verified.scopes.filter((scope) => key.scopes.some((held) => scopeCovers(held, scope)))
  const to: KeyRecord = { ...key, scopes }
  verified.narrowed = { from: key, to }
  return to
}
