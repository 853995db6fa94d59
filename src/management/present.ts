// Rows to API objects: explicit field lists, timestamps as RFC 3339 strings.
import type { KeyRow } from '../store/keys.js'
import type { TenantRow } from '../store/tenants.js'
import { shownLimits } from '../tenancy/limits.js'
import type { ApiKey, SubAccount } from './schemas.js'

const iso = (date: Date | null) => (date === null ? null : date.toISOString())

export function presentSubAccount(row: TenantRow): SubAccount {
  return {
    id: row.id,
    name: row.name,
    external_id: row.external_id,
    status: row.status,
    metadata: row.metadata,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
    deactivated_at: iso(row.deactivated_at),
    limits: shownLimits(row.limits),
  }
}

export function presentKey(row: KeyRow): ApiKey {
  return {
    id: row.id,
    name: row.name,
    scopes: row.scopes,
    prefix: row.prefix,
    status: row.status,
    created_at: row.created_at.toISOString(),
    revoked_at: iso(row.revoked_at),
    last_used_at: iso(row.last_used_at),
  }
}
