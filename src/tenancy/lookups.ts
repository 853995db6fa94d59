// The questions authentication and the acting rules ask of the store, behind one interface, so
// that a cache can sit in front of Postgres without touching the rules (docs/architecture.md, caches).
import { withDeadline, type Sql } from '../store/db.js'
import { KeyLookupBatcher, type KeyBatchPacing } from '../store/key-lookup-batcher.js'
import { findKeyById, findKeysByDigests, type KeyCredential, type KeyStatus } from '../store/api-keys.js'
import type { TenantLimits } from '../limits/tenant-limits.js'
import {
  findSubAccountIdByExternalId,
  getSubAccount,
  getTenant,
  hasActiveSubAccounts,
  type TenantRow,
  type TenantStatus,
} from '../store/tenants.js'

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
}

export interface TenancyLookups {
  /** The key whose value has this SHA-256 digest, revoked or not. */
  keyByDigest(keyDigest: Buffer): Promise<KeyRecord | null>
  /** The key with this id, revoked or not (an access token names its key by id). */
  keyById(id: string): Promise<KeyRecord | null>
  tenant(id: string): Promise<TenantRecord | null>
  /**
   * The sub-account `id` of `parentId`; null when there is none, whether the id names no tenant
   * or another's: the acting rules ask this, never `tenant`, so that both take one path (and one
   * time) through the caches (docs/decisions.md, the acting header).
   */
  subAccount(parentId: string, id: string): Promise<TenantRecord | null>
  subAccountIdByExternalId(parentId: string, externalId: string): Promise<string | null>
  hasActiveSubAccounts(parentId: string): Promise<boolean>
  /**
   * Behind a cache: how a caller may reuse answers for a moment. `version()` moves whenever a
   * cached answer may have changed (an eviction); answers may be reused for `windowMs` while it
   * has not moved, the cache having shortened its own TTL by as much. Absent when every answer
   * comes from the store as it is.
   */
  readonly reuse?: { version(): number; readonly windowMs: number }
}

/**
 * How long a request waits for Postgres to answer a lookup. Past it, a record seen within the
 * stale window still serves, and anything else is 503 store_unavailable (docs/architecture.md,
 * caches): a partition must not hang requests until a TCP or connect timeout, tens of seconds later.
 * For a key, the wait for its turn in the key batcher counts too.
 */
export const LOOKUP_DEADLINE_MS = 500

/** What the Postgres lookups count (cache/metrics.ts): each query sent, and the digests key queries asked for. */
export interface PostgresLookupCounts {
  query(): void
  keyDigests(n: number): void
}

export interface PostgresLookupOptions {
  deadlineMs?: number
  counts?: PostgresLookupCounts
  keyPacing?: Partial<KeyBatchPacing>
}

const keyRecord = (row: KeyCredential | null): KeyRecord | null =>
  row && {
    id: row.id,
    tenantId: row.tenant_id,
    scopes: row.scopes,
    status: row.status,
    expiresAt: row.expires_at === null ? null : row.expires_at.getTime(),
    ipAllowlist: row.ip_allowlist,
  }

const tenantRecord = (row: TenantRow | null): TenantRecord | null =>
  row && {
    id: row.id,
    parentId: row.parent_id,
    externalId: row.external_id,
    status: row.status,
    limits: row.limits,
    keyIpAllowlist: row.key_policy?.ip_allowlist ?? null,
  }

export function postgresLookups(sql: Sql, options: PostgresLookupOptions = {}): TenancyLookups {
  const deadlineMs = options.deadlineMs ?? LOOKUP_DEADLINE_MS
  const counts = options.counts
  // Key lookups are the ones anyone can make up (the checksum is public): they share paced
  // queries (store/key-lookup-batcher.ts). The others need a key that exists first.
  const keys = new KeyLookupBatcher<KeyCredential>(
    async (digests) => (await findKeysByDigests(sql, digests)).map((row) => ({ keyDigest: row.key_digest, row })),
    {
      pacing: { queryDeadlineMs: deadlineMs, ...options.keyPacing },
      onQuery: (n) => {
        counts?.query()
        counts?.keyDigests(n)
      },
    },
  )
  const ask = <T>(query: () => Promise<T>): Promise<T> => {
    counts?.query()
    return withDeadline(query(), deadlineMs)
  }
  return {
    keyByDigest: async (keyDigest) => keyRecord(await keys.lookup(keyDigest, deadlineMs)),
    keyById: async (id) => keyRecord(await ask(() => findKeyById(sql, id))),
    tenant: async (id) => tenantRecord(await ask(() => getTenant(sql, id))),
    subAccount: async (parentId, id) => tenantRecord(await ask(() => getSubAccount(sql, parentId, id))),
    subAccountIdByExternalId: (parentId, externalId) =>
      ask(() => findSubAccountIdByExternalId(sql, parentId, externalId)),
    hasActiveSubAccounts: (parentId) => ask(() => hasActiveSubAccounts(sql, parentId)),
  }
}
