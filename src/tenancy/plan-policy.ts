// A sub-account's key policy allow-list filled in from its plan (docs/api.md, Plans): its own
// where it sets one, else its plan's (its own plan_id's, else its parent's default). Read through
// the plan's cache entry, as the limits are (limits/subjects.ts), so that a change of a plan
// reaches every key of its sub-accounts with one invalidation.
import type { Principal } from '../auth/principal.js'
import type { TenancyLookups } from '../shared/tenancy-records.js'

/** `principal` with its tenant's `keyIpAllowlist` in force; itself when its own stands or there is no plan. */
export async function withPlanAllowlist(principal: Principal, lookups: TenancyLookups): Promise<Principal> {
  const tenant = principal.tenant
  if (tenant.parentId === null || tenant.keyIpAllowlist != null) return principal
  const planId = tenant.planId ?? (await lookups.tenant(tenant.parentId))?.defaultPlanId ?? null
  if (planId === null) return principal
  const allowlist = (await lookups.plan(planId))?.keyIpAllowlist ?? null
  if (allowlist === null) return principal
  return { ...principal, tenant: { ...tenant, keyIpAllowlist: allowlist } }
}
