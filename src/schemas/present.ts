// Rows to API objects: explicit field lists, timestamps as RFC 3339 strings.
import { keyState } from '../shared/key-expiry.js'
import type { KeyRow } from '../store/api-keys.js'
import type { TenantRow } from '../store/tenants.js'
import type { PlanRow } from '../store/plans.js'
import { effectiveKeyPolicy, shownKeyPolicy } from '../guardrails/key-policy.js'
import { effectiveLimits } from '../shared/plan-limits.js'
import { shownLimits } from '../shared/tenant-limits.js'
import type { ApiKey } from './keys.js'
import type { Plan } from './plans.js'
import type { SubAccount } from './sub-accounts.js'
import type { CreditGrant } from './credits.js'
import type { CreditGrantRow } from '../store/credit-grants.js'

const iso = (date: Date | null) => (date === null ? null : date.toISOString())

/**
 * `plan`: the plan in force (its own `plan_id`'s, else its parent's default), null for none: what
 * its effective limits and key policy fall back on (docs/api.md, Plans).
 */
export function presentSubAccount(row: TenantRow, plan: Pick<PlanRow, 'limits' | 'key_policy'> | null): SubAccount {
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
    placement: row.placement,
    plan_id: row.plan_id,
    effective_limits: shownLimits(effectiveLimits(row.limits, plan?.limits)),
    effective_key_policy: shownKeyPolicy(effectiveKeyPolicy(row.key_policy, plan?.key_policy ?? null)),
  }
}

export function presentPlan(row: PlanRow): Plan {
  return {
    id: row.id,
    name: row.name,
    limits: shownLimits(row.limits),
    key_policy: shownKeyPolicy(row.key_policy),
    metadata: row.metadata,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
  }
}

/** A key as shown now: `status` is `expired` once an active key is past `expires_at`. */
export function presentKey(row: KeyRow, nowMs = Date.now()): ApiKey {
  return {
    id: row.id,
    name: row.name,
    scopes: row.scopes,
    prefix: row.prefix,
    origin: row.origin,
    status: keyState(row, nowMs),
    created_at: row.created_at.toISOString(),
    expires_at: iso(row.expires_at),
    rolled_from: row.rolled_from,
    ip_allowlist: row.ip_allowlist,
    revoked_at: iso(row.revoked_at),
    last_used_at: iso(row.last_used_at),
    leaked: row.leaked,
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
