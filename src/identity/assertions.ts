// Signed identity for upstreams (docs/credentials.md): the request's identity as a JWT the gateway
// signs, which a route's upstream verifies against the JWKS. Assertions are cached per key,
// resolved tenant, audience and signing key, so that a warm request costs no signature.
import { LRUCache } from 'lru-cache'
import type { Principal } from '../auth/principal.js'
import { type EvictionListener, recordOfEntry } from '../cache/entry-names.js'
import type { CredentialMetrics } from '../auth/credential-metrics.js'
import type { Tally } from '../shared/fast-metrics.js'
import type { RouteIdentity } from './route-identity.js'
import type { TenantRecord } from '../shared/tenancy-records.js'
import type { Keyring } from '../signing-keys/keyring.js'

/** The JOSE `typ` of an assertion: a plain JWT, not an access token (`at+jwt`). */
export const IDENTITY_TOKEN_TYPE = 'JWT'
/** Bound of the cache: about 1.5 KiB each (token, name, entry), so some 15 MiB when full. */
export const MAX_CACHED_ASSERTIONS = 10_000
/** An assertion is signed again once less than this share of its life is left. */
const RENEW_WHEN_LEFT = 0.1

interface CachedAssertion {
  readonly keyId: string
  readonly resolvedTenantId: string
  readonly callerTenantId: string
  /** '' until the first signing has settled. */
  token: string
  /** The signing key that signed `token`: once another one signs, the assertion is signed anew. */
  kid: string
  /** Date.now() from which `token` is no longer sent: 90 % of its life. */
  renewAt: number
  /** The one signing in flight for this entry, which every request for it meanwhile waits for. */
  signing: Promise<string> | null
  /** Set once the entry has left the cache (dropped or pushed out): a remembered one is then looked up again. */
  gone: boolean
}

/** An assertion to send now, or the signing to wait for. */
export type AssertionFor = (principal: Principal, acting: TenantRecord) => string | Promise<string>

export interface IdentityAssertionsOptions {
  keyring: Keyring
  /** `iss` (ISSUER_URL). */
  issuer: string
  /** Counted once per signature made. */
  signatures: Tally
  maxEntries?: number
}

/** The principal's scopes, as the assertion's `scope` claim and `X-Service-Scopes` carry them. */
function scopeOf(principal: Principal): string {
  return principal.key.scopes.join(' ')
}

export class IdentityAssertions {
  private readonly keyring: Keyring
  private readonly issuer: string
  private readonly signatures: Tally
  private readonly entries: LRUCache<string, CachedAssertion>
  /** Names of the entries of each key, and of each tenant (resolved or caller): dropped with it. */
  private readonly byKey = new Map<string, Set<string>>()
  private readonly byTenant = new Map<string, Set<string>>()

  constructor(options: IdentityAssertionsOptions) {
    this.keyring = options.keyring
    this.issuer = options.issuer
    this.signatures = options.signatures
    this.entries = new LRUCache<string, CachedAssertion>({
      max: options.maxEntries ?? MAX_CACHED_ASSERTIONS,
      dispose: (entry, name) => {
        entry.gone = true
        this.unindex(entry, name)
      },
    })
  }

  /**
   * The assertions of one route. Its entries are named by key, resolved tenant, scopes, lifetime
   * and audience (the caller tenant follows from the key); the signing key is kept in the entry,
   * and an entry signed by another than the one that signs now is signed anew.
   *
   * Requests admitted from the proxy's memory of the last second (tenancy/recent-admissions.ts)
   * share one principal object, which belongs to one acting tenant: its entry is remembered by
   * that object, so such a request finds it without building the name (a fresh string to hash
   * costs more than the rest of the lookup) and allocates nothing.
   */
  forRoute(identity: RouteIdentity): AssertionFor {
    const suffix = `\n${identity.ttlSeconds}\n${identity.audience}`
    const byPrincipal = new WeakMap<Principal, CachedAssertion>()
    return (principal, acting) => {
      const now = Date.now()
      let kid: string
      try {
        kid = this.keyring.signingKey(now).kid
      } catch (err) {
        return Promise.reject(err)
      }
      let entry = byPrincipal.get(principal)
      if (entry === undefined || entry.gone || entry.resolvedTenantId !== acting.id) {
        entry = this.entryFor(principal, acting, suffix)
        byPrincipal.set(principal, entry)
      }
      if (entry.signing !== null) return entry.signing
      if (entry.kid === kid && now < entry.renewAt) return entry.token
      return this.sign(entry, identity, scopeOf(principal))
    }
  }

  /** The cached entry of this key, tenant, scopes and route, made (unsigned) if there is none. */
  private entryFor(principal: Principal, acting: TenantRecord, suffix: string): CachedAssertion {
    const name = `${principal.key.id}\n${acting.id}\n${scopeOf(principal)}${suffix}`
    let entry = this.entries.get(name)
    if (entry === undefined) {
      entry = {
        keyId: principal.key.id,
        resolvedTenantId: acting.id,
        callerTenantId: principal.tenant.id,
        token: '',
        kid: '',
        renewAt: 0,
        signing: null,
        gone: false,
      }
      this.entries.set(name, entry)
      this.index(entry, name)
    }
    return entry
  }

  /** Signs the entry's assertion anew; concurrent requests for it share this signing. */
  private sign(entry: CachedAssertion, identity: RouteIdentity, scope: string): Promise<string> {
    const signing = this.signed(entry, identity, scope)
    entry.signing = signing
    const settled = () => {
      if (entry.signing === signing) entry.signing = null
    }
    signing.then(settled, settled)
    return signing
  }

  private async signed(entry: CachedAssertion, identity: RouteIdentity, scope: string): Promise<string> {
    const now = Date.now() / 1000
    const iat = Math.floor(now)
    const claims = {
      iss: this.issuer,
      aud: identity.audience,
      sub: entry.resolvedTenantId,
      caller_tenant: entry.callerTenantId,
      key_id: entry.keyId,
      scope,
      // RFC 8693 §4.1: the party acting for the subject, present only when someone else acts.
      ...(entry.resolvedTenantId === entry.callerTenantId ? {} : { act: { sub: entry.callerTenantId } }),
      nbf: iat,
    }
    const signed = await this.keyring.sign(claims, {
      typ: IDENTITY_TOKEN_TYPE,
      ttlSeconds: identity.ttlSeconds,
      now,
    })
    this.signatures.inc()
    entry.token = signed.token
    entry.kid = signed.kid
    entry.renewAt = (iat + identity.ttlSeconds * (1 - RENEW_WHEN_LEFT)) * 1000
    return signed.token
  }

  /** Drops the assertions of the keys and tenants whose cache entries were evicted. */
  readonly evicted: EvictionListener = (names) => {
    if (names === null) return this.clear()
    for (const name of names) {
      const record = recordOfEntry(name)
      if (record === null) continue
      const named = (record.kind === 'key' ? this.byKey : this.byTenant).get(record.id)
      // A copy: each delete takes its name out of the set (dispose).
      if (named !== undefined) for (const entryName of [...named]) this.entries.delete(entryName)
    }
  }

  /** Drops every assertion (a rotation, or a cache that no longer trusts what it holds). */
  clear(): void {
    this.entries.clear()
    this.byKey.clear()
    this.byTenant.clear()
  }

  /** How many assertions are held (tests, metrics). */
  get size(): number {
    return this.entries.size
  }

  private index(entry: CachedAssertion, name: string): void {
    add(this.byKey, entry.keyId, name)
    add(this.byTenant, entry.resolvedTenantId, name)
    add(this.byTenant, entry.callerTenantId, name)
  }

  private unindex(entry: CachedAssertion, name: string): void {
    remove(this.byKey, entry.keyId, name)
    remove(this.byTenant, entry.resolvedTenantId, name)
    remove(this.byTenant, entry.callerTenantId, name)
  }
}

function add(index: Map<string, Set<string>>, id: string, name: string): void {
  const names = index.get(id)
  if (names === undefined) index.set(id, new Set([name]))
  else names.add(name)
}

function remove(index: Map<string, Set<string>>, id: string, name: string): void {
  const names = index.get(id)
  if (names === undefined) return
  names.delete(name)
  if (names.size === 0) index.delete(id)
}

/**
 * The assertions of an app: dropped with the key and tenant records they were made from (the
 * tenancy cache's evictions, local and from the bus) and at every change of the signing keys.
 */
export function identityAssertions(options: {
  keyring: Keyring
  issuer: string
  metrics: CredentialMetrics
  cache: { onEvict(listener: EvictionListener): void }
}): IdentityAssertions {
  const { keyring, issuer, metrics, cache } = options
  const assertions = new IdentityAssertions({ keyring, issuer, signatures: metrics.signatures.identity })
  metrics.identityAssertionsHeld = () => assertions.size
  cache.onEvict(assertions.evicted)
  keyring.onChange(() => assertions.clear())
  return assertions
}
