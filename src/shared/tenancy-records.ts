// The records of keys and tenants that authentication and the acting rules read, and the questions
// they ask of the store, behind one interface, so that a cache can sit in front of Postgres without
// touching the rules (docs/internals.md, caches). Postgres answers them in store/tenancy-lookups.ts.
import type { RequestTrace } from './request-trace.js'
import type { TenantLimits } from './tenant-limits.js'

export type KeyStatus = 'active' | 'revoked'
export type TenantStatus = 'active' | 'deactivated'

export interface KeyRecord {
  readonly id: string
  readonly tenantId: string
  readonly scopes: readonly string[]
  readonly status: KeyStatus
  /**
   * When it expires (ms since the epoch), null for never. Absent on a record an older version
   * cached before keys could expire: none could then, so absent is never.
   */
  readonly expiresAt?: number | null
  /** The addresses it may be used from; null or absent: any (docs/api.md, IP allow-lists). */
  readonly ipAllowlist?: readonly string[] | null
}

/** True once the key is past its expiry (docs/api.md, key expiry). */
export function isExpired(key: KeyRecord, nowMs = Date.now()): boolean {
  return key.expiresAt != null && key.expiresAt <= nowMs
}

export interface TenantRecord {
  readonly id: string
  /** null for a parent account. */
  readonly parentId: string | null
  readonly externalId: string | null
  readonly status: TenantStatus
  /**
   * Its limits (docs/api.md, Limits and quotas); null: none. Absent on a record an older version
   * cached in Redis before limits existed: treat it as unknown and read the tenant again.
   */
  readonly limits?: TenantLimits | null
  /** Its key policy's allow-list, for every key of the sub-account; null or absent: any address. */
  readonly keyIpAllowlist?: readonly string[] | null
  /**
   * A sub-account's cell, or a parent account's default cell (docs/api.md, Cells); null or absent:
   * none (a record an older version cached had none: no tenant was placed before cells).
   */
  readonly placement?: string | null
  /**
   * A sub-account's plan (docs/api.md, Plans); null or absent: its parent's `defaultPlanId`. Kept
   * as an id, its limits read through `TenancyLookups.plan`: a plan's change is one entry to drop
   * on every replica, whatever the number of its sub-accounts.
   */
  readonly planId?: string | null
  /** A parent account's plan for its sub-accounts without one; null or absent: none. */
  readonly defaultPlanId?: string | null
  /**
   * A sub-account's grants, by meter (docs/api.md, Credits), as the limiter takes them
   * (limits/types.ts, CreditBalance): of every meter it has grants of, and of each its own
   * `limits.credits` names; absent: none read.
   */
  readonly credits?: { readonly [meter: string]: CreditGrants }
}

/** A plan as the limiter reads it: its limits (null: none); the rest is the API's. */
export interface PlanRecord {
  readonly id: string
  readonly limits: TenantLimits | null
  /** Its key policy's allow-list; null: any address. */
  readonly keyIpAllowlist: readonly string[] | null
}

/** A meter's grants as read: what the ones that no longer count gave, and the live ones. */
export interface CreditGrants {
  readonly settled: number
  readonly live: readonly { units: number; left: number; expiresAt: number | null }[]
}

export interface TenancyLookups {
  /** The key whose value has this SHA-256 digest, revoked or not. */
  keyByDigest(keyDigest: Buffer): Promise<KeyRecord | null>
  /** The key with this id, revoked or not (an access token names its key by id). */
  keyById(id: string): Promise<KeyRecord | null>
  tenant(id: string): Promise<TenantRecord | null>
  /**
   * The sub-account `id` of `parentId`; null when there is none, whether the id names no tenant or
   * another's: the acting rules ask this, never `tenant`, so that both take one path (and one time)
   * through the caches (docs/decisions/0030-not-yours-and-no-such-take-the-same-time-too.md).
   */
  subAccount(parentId: string, id: string): Promise<TenantRecord | null>
  subAccountIdByExternalId(parentId: string, externalId: string): Promise<string | null>
  hasActiveSubAccounts(parentId: string): Promise<boolean>
  /** The plan with this id, whoever's (a tenant record names only its own parent's); null: none. */
  plan(id: string): Promise<PlanRecord | null>
  /**
   * Behind a cache: how a caller may reuse answers for a moment. `version()` moves whenever a
   * cached answer may have changed (an eviction); answers may be reused for `windowMs` while it
   * has not moved, the cache having shortened its own TTL by as much. Absent when every answer
   * comes from the store as it is.
   */
  readonly reuse?: { version(): number; readonly windowMs: number }
  /**
   * Behind a cache: the same lookups, whose calls to Redis and Postgres (a miss's fill) are spans
   * of `trace` (docs/operations.md, Traces). Absent without a cache, and on a view already traced.
   */
  readonly traced?: (trace: RequestTrace) => TenancyLookups
}
