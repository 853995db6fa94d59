// The questions authentication and the acting rules ask of the store, behind one interface, so
// that a cache can sit in front of Postgres without touching the rules (DESIGN §8).
import type { Sql } from '../store/db.js'
import { findKeyByDigest, type KeyStatus } from '../store/keys.js'
import { countActiveSubAccounts, findSubAccountIdByExternalId, getTenant, type TenantStatus } from '../store/tenants.js'

export interface KeyRecord {
  readonly id: string
  readonly tenantId: string
  readonly scopes: readonly string[]
  readonly status: KeyStatus
}

export interface TenantRecord {
  readonly id: string
  /** null for a parent account. */
  readonly parentId: string | null
  readonly externalId: string | null
  readonly status: TenantStatus
}

export interface TenancyLookups {
  /** The key whose value has this SHA-256 digest, revoked or not. */
  keyByDigest(keyDigest: Buffer): Promise<KeyRecord | null>
  tenant(id: string): Promise<TenantRecord | null>
  subAccountIdByExternalId(parentId: string, externalId: string): Promise<string | null>
  activeSubAccountCount(parentId: string): Promise<number>
}

export function postgresLookups(sql: Sql): TenancyLookups {
  return {
    async keyByDigest(keyDigest) {
      const row = await findKeyByDigest(sql, keyDigest)
      return row && { id: row.id, tenantId: row.tenant_id, scopes: row.scopes, status: row.status }
    },
    async tenant(id) {
      const row = await getTenant(sql, id)
      return row && { id: row.id, parentId: row.parent_id, externalId: row.external_id, status: row.status }
    },
    subAccountIdByExternalId: (parentId, externalId) => findSubAccountIdByExternalId(sql, parentId, externalId),
    activeSubAccountCount: (parentId) => countActiveSubAccounts(sql, parentId),
  }
}
