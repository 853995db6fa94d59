// The proxy's tenancy check (tenancy/hook.ts) behind a memory of the last second's admissions:
// a client that sends the same key (or access token) and acting header again is admitted without a lookup.
import { withPlanAllowlist } from './plan-policy.js'
import { hash } from 'node:crypto'
import { performance } from 'node:perf_hooks'
import type { FastifyRequest } from 'fastify'
import { MAX_ACCESS_TOKEN_LENGTH } from '../auth/access-tokens.js'
import type { Principal } from '../auth/principal.js'
import { singleHeaderCounts, type SingleHeaderCounts } from '../http/header-counts.js'
import { isWriteMethod } from './acting.js'
import { ACTING_HEADER } from '../shared/header-names.js'
import { resolveInto } from './hook.js'
import { limitSubjects } from '../limits/subjects.js'
import type { LimitSubject } from '../limits/types.js'
import type { TenancyLookups, TenantRecord } from '../shared/tenancy-records.js'

interface Admission {
  readonly principal: Principal
  readonly actingTenant: TenantRecord
  readonly limitSubjects: readonly LimitSubject[]
}

declare module 'fastify' {
  interface FastifyRequest {
    /** A proxied request's limits (limits/subjects.ts); set with its admission. */
    limitSubjects: readonly LimitSubject[] | null
  }
}

/**
 * Admissions of the last moment (a second by default), by the exact header values that earned
 * them. A client that sends the same key and acting header again is admitted without the four
 * cache lookups and their promises, which were most of the gateway's own work per proxied
 * request. The whole set is dropped when its window has passed and whenever the cache evicts
 * anything (its version moves), so a revoke or a deactivation reaches it exactly as it reaches the
 * cache, and the cache shortens its TTL by the window, so a lost invalidation is still bounded by
 * the configured TTL. An admission is not reused once its key has expired. Only successes are
 * kept. Its keys hold raw Authorization values, for one window at most (an access token's, too
 * long to keep as it is, by its SHA-256). An admission by an access token is reused only while
 * the token is (tenancy/hook.ts; docs/credentials.md).
 */
class RecentAdmissions {
  static readonly MAX_ENTRIES = 10_000
  private readonly entries = new Map<string, Admission>()
  private version = -1
  private startedAt = 0

  private readonly windowMs: number
  constructor(windowMs: number) {
    this.windowMs = windowMs
  }

  /** Starts over when the window has passed or the cache's version moved. */
  private current(version: number): Map<string, Admission> {
    const now = performance.now()
    if (version !== this.version || now - this.startedAt >= this.windowMs) {
      this.entries.clear()
      this.version = version
      this.startedAt = now
    }
    return this.entries
  }

  get(key: string, version: number): Admission | undefined {
    return this.current(version).get(key)
  }

  set(key: string, admission: Admission, version: number): void {
    const entries = this.current(version)
    if (entries.size < RecentAdmissions.MAX_ENTRIES) entries.set(key, admission)
  }
}

/** Longer header values than a real key (about 60 characters) or acting value are not remembered as they are. */
const MAX_REMEMBERED_HEADER = 200
/** An access token is longer: remembered by its digest, up to the longest the gateway accepts. */
const MAX_REMEMBERED_TOKEN_HEADER = MAX_ACCESS_TOKEN_LENGTH + 100

/**
 * What makes two requests' admissions the same: both headers, each sent once, and whether the
 * method writes (a write without the acting header has a rule of its own). Null when the request
 * is not one to remember (a header repeated or missing: the full check answers those).
 */
function admissionKey(request: FastifyRequest, counts: SingleHeaderCounts): string | null {
  const authorization = request.headers.authorization
  const acting = request.headers[ACTING_HEADER]
  if (counts.authorization !== 1 || authorization === undefined || counts.acting > 1 || Array.isArray(acting))
    return null
  // Bounded memory: a key may be sent with any number of spaces, a long value is not remembered.
  if (acting !== undefined && acting.length > MAX_REMEMBERED_HEADER) return null
  let credential = authorization
  if (authorization.length > MAX_REMEMBERED_HEADER) {
    // Only an access token (a JWT has dots; a key has none) may be this long and still remembered.
    if (authorization.length > MAX_REMEMBERED_TOKEN_HEADER || !authorization.includes('.')) return null
    // '#' marks a digest: no Authorization value starts with it.
    credential = `#${hash('sha256', authorization, 'base64')}`
  }
  // An empty acting header is not an absent one: '-' marks absent, '+' precedes a value.
  return `${isWriteMethod(request.method) ? 'w' : 'r'}${acting === undefined ? '-' : `+${acting}`}\n${credential}`
}

export interface TenancyAdmission {
  /**
   * Sets the principal and the acting tenant from an identical admission of the last second;
   * false when there is none (then call resolve).
   */
  fromRecent(request: FastifyRequest): boolean
  /** The full check, through the caches; a success is remembered for fromRecent. */
  resolve(request: FastifyRequest): Promise<void>
}

/** The proxy's check: the full one, behind a memory of the last second's admissions. */
export function tenancyAdmission(lookups: TenancyLookups): TenancyAdmission {
  const reuse = lookups.reuse
  // Without a cache an answer may change at any moment: nothing is remembered.
  if (reuse === undefined) {
    return {
      fromRecent: () => false,
      async resolve(request) {
        await resolveInto(request, lookups, singleHeaderCounts(request))
        request.principal = await withPlanAllowlist(request.principal!, lookups)
        request.limitSubjects = await limitSubjects(request.principal!, request.actingTenant!, lookups)
      },
    }
  }
  const recent = new RecentAdmissions(reuse.windowMs)
  return {
    fromRecent(request) {
      const key = admissionKey(request, singleHeaderCounts(request))
      const admission = key === null ? undefined : recent.get(key, reuse.version())
      if (admission === undefined) return false
      // Never past the key's expiry: the full check answers 401 key_expired from then on.
      const expiresAt = admission.principal.key.expiresAt
      if (expiresAt != null && Date.now() >= expiresAt) return false
      // A token past its expiry, or whose signing key was withdrawn, is checked in full (and refused).
      const token = admission.principal.accessToken
      if (token !== undefined && !request.server.accessTokens.stillUsable(token)) return false
      request.principal = admission.principal
      request.actingTenant = admission.actingTenant
      request.limitSubjects = admission.limitSubjects
      return true
    },
    async resolve(request) {
      const counts = singleHeaderCounts(request)
      const versionBefore = reuse.version()
      await resolveInto(request, lookups, counts)
      const principal = await withPlanAllowlist(request.principal!, lookups)
      request.principal = principal
      const actingTenant = request.actingTenant!
      request.limitSubjects = await limitSubjects(principal, actingTenant, lookups)
      // A change evicted while this check ran may have been read before it: not remembered.
      if (reuse.version() !== versionBefore) return
      const key = admissionKey(request, counts)
      if (key !== null)
        recent.set(key, { principal, actingTenant, limitSubjects: request.limitSubjects }, versionBefore)
    },
  }
}
