// Who a request is once its credential is checked (a key and its tenant), and the refusals every
// credential shares, whether an API key (authenticate.ts) or an access token (access-tokens.ts).
import { ApiError } from '../errors.js'
import { isExpired, type KeyRecord, type TenancyLookups, type TenantRecord } from '../shared/tenancy-records.js'

export interface Principal {
  /** The key; for an access token, its key holding the token's scopes only. */
  readonly key: KeyRecord
  /** The tenant that owns the key. */
  readonly tenant: TenantRecord
  /** Set when an access token authenticated the request, rather than the key itself. */
  readonly accessToken?: AccessTokenUse
}

const WWW_AUTHENTICATE = { 'www-authenticate': 'Bearer' }

/**
 * The one refusal of a credential that does not authenticate: missing, malformed, unknown,
 * revoked, or an access token that fails its own checks (docs/api.md, Authentication).
 */
export function unauthenticated(detail: string): ApiError {
  return new ApiError('unauthenticated', detail, { headers: WWW_AUTHENTICATE })
}

/** The refusal of a key past its expiry (docs/api.md), and of its access tokens. */
export function keyExpired(): ApiError {
  return new ApiError('key_expired', 'the key has expired', {
    headers: { 'www-authenticate': 'Bearer error="invalid_token", error_description="the key has expired"' },
  })
}

/** What a principal authenticated by an access token carries, to be checked again on reuse. */
export interface AccessTokenUse {
  readonly kid: string
  readonly usableUntilMs: number
  readonly expiresAtMs: number
}

/**
 * The principal of a key found by its digest, or of a verified access token's key (found by the
 * token's `sub`): both answered alike, unknown and revoked keys with one answer, so that a caller
 * learns nothing about which keys existed.
 */
export async function principalOfKey(key: KeyRecord | null, lookups: TenancyLookups): Promise<Principal> {
  if (key === null) throw unauthenticated('the API key is unknown or revoked')
  if (key.status !== 'active') throw refusedKey(unauthenticated('the API key is unknown or revoked'), key)
  // Read from the record every time, cached or not: an expiry needs no message to the replicas.
  if (isExpired(key)) throw refusedKey(keyExpired(), key)
  const tenant = await lookups.tenant(key.tenantId)
  if (tenant === null) throw unauthenticated('the API key is unknown or revoked')
  return { key, tenant }
}

/**
 * The keys behind 401s for a key that exists (revoked, expired), used directly or through an
 * access token (access-tokens.ts): the request log records those
 * for the key's account (request-log/), after the answer, so that they take no longer than an
 * unknown key's.
 */
const refusedKeys = new WeakMap<Error, KeyRecord>()

export function refusedKey(error: ApiError, key: KeyRecord): ApiError {
  refusedKeys.set(error, key)
  return error
}

/** The existing key an authentication error refused, if it was one. */
export function keyRefusedBy(error: unknown): KeyRecord | undefined {
  return error instanceof Error ? refusedKeys.get(error) : undefined
}

/** A key of a deactivated sub-account authenticates but may do nothing (docs/api.md). */
export function requireActiveTenant(principal: Principal): void {
  if (principal.tenant.status !== 'active') {
    throw new ApiError('tenant_deactivated', 'the account that owns this key is deactivated')
  }
}
