// The tenancy lookups answered by Postgres (shared/tenancy-records.ts has the interface): key
// lookups paced through one batcher, every query under a deadline.
import { withDeadline, type Sql } from './db.js'
import { STORE_DEADLINES } from './deadlines.js'
import { KeyLookupBatcher, type KeyBatchPacing } from './key-lookup-batcher.js'
import { creditGrantsOf, GRANTS_OF_TENANT, type GrantTuple } from './credit-grants.js'
import { findKeyById, findKeysByDigests, type KeyCredential } from './api-keys.js'
import type { KeyRecord, PlanRecord, TenancyLookups, TenantRecord } from '../shared/tenancy-records.js'
import { getPlanById, type PlanRow } from './plans.js'
import { COLUMNS, findSubAccountIdByExternalId, hasActiveSubAccounts, type TenantRow } from './tenants.js'

/** What the Postgres lookups count (cache/metrics.ts): each query sent, and the digests key queries asked for. */
export interface PostgresLookupCounts {
  query(): void
  keyDigests(n: number): void
}

export interface PostgresLookupOptions {
  /** Default STORE_DEADLINES.lookupMs (store/deadlines.ts). */
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
    placement: row.placement,
    planId: row.plan_id,
    defaultPlanId: row.default_plan_id,
  }

const planRecord = (row: PlanRow | null): PlanRecord | null =>
  row && { id: row.id, limits: row.limits, keyIpAllowlist: row.key_policy?.ip_allowlist ?? null }

/**
 * A tenant (of `parentId` when given) and, a sub-account, its grants, in one statement: a lookup
 * on a cache miss is one round trip, credits or not. The record is what a grant or a void
 * invalidates (docs/api.md, Credits).
 */
async function tenantWithCredits(sql: Sql, id: string, parentId: string | null): Promise<TenantRecord | null> {
  const [row] = await sql<(TenantRow & { credit_grants: GrantTuple[] | null })[]>`
    select ${sql.unsafe(COLUMNS)}, ${sql.unsafe(GRANTS_OF_TENANT)} from tenants
    where id = ${id} ${parentId === null ? sql`` : sql`and parent_id = ${parentId}`}`
  const record = tenantRecord(row ?? null)
  if (record === null || row!.credit_grants === null) return record
  return { ...record, credits: creditGrantsOf(row!.credit_grants, Object.keys(record.limits?.credits ?? {})) }
}

export function postgresLookups(sql: Sql, options: PostgresLookupOptions = {}): TenancyLookups {
  const deadlineMs = options.deadlineMs ?? STORE_DEADLINES.lookupMs
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
    tenant: (id) => ask(() => tenantWithCredits(sql, id, null)),
    subAccount: (parentId, id) => ask(() => tenantWithCredits(sql, id, parentId)),
    subAccountIdByExternalId: (parentId, externalId) =>
      ask(() => findSubAccountIdByExternalId(sql, parentId, externalId)),
    hasActiveSubAccounts: (parentId) => ask(() => hasActiveSubAccounts(sql, parentId)),
    plan: async (id) => planRecord(await ask(() => getPlanById(sql, id))),
  }
}
