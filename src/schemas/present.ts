// Rows to API objects: explicit field lists, timestamps as RFC 3339 strings.
import { keyState } from '../shared/key-expiry.js'
import type { KeyRow } from '../store/api-keys.js'
import type { TenantRow } from '../store/tenants.js'
import { shownKeyPolicy } from '../guardrails/key-policy.js'
import { shownLimits } from '../shared/tenant-limits.js'
import type { ApiKey } from './keys.js'
import type { SubAccount } from './sub-accounts.js'
import type { CreditGrant } from './credits.js'
import type { CreditGrantRow } from '../store/credit-grants.js'

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
    key_policy: shownKeyPolicy(row.key_policy),
  }
}

/** A key as shown now: `status` is `expired` once an active key is past `expires_at`. */
export function presentKey(row: KeyRow, nowMs = Date.now()): ApiKey {
  return {
    id: row.id,
    name: row.name,
    scopes: row.scopes,
    prefix: row.prefix,
    status: keyState(row, nowMs),
    created_at: row.created_at.toISOString(),
    expires_at: iso(row.expires_at),
    rolled_from: row.rolled_from,
    ip_allowlist: row.ip_allowlist,
    revoked_at: iso(row.revoked_at),
    last_used_at: iso(row.last_used_at),
  }
}

/** A credit grant: a voided or expired grant has nothing left (docs/api.md, Credits). */
export function presentCreditGrant(row: CreditGrantRow): CreditGrant {
  return {
    id: row.id,
    meter: row.meter,
    units: row.units,
    units_left: row.live ? row.units_left : 0,
    priority: row.priority,
    expires_at: iso(row.expires_at),
    voided_at: iso(row.voided_at),
    created_at: row.created_at.toISOString(),
    metadata: row.metadata,
  }
}
