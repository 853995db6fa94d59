// Which limits apply to a proxied request (docs/api.md, limits and quotas): the sub-account it acts
// as, if any, and the parent account, whose limits bound everything that acts as it or as any of
// its sub-accounts. Built once per admission and remembered with it (tenancy/recent-admissions.ts),
// so that a request admitted from memory finds them without a lookup.
import type { Principal } from '../auth/principal.js'
import { effectiveLimits } from '../shared/plan-limits.js'
import type { TenantLimits } from '../shared/tenant-limits.js'
import type { TenancyLookups, TenantRecord } from '../shared/tenancy-records.js'
import type { CreditBalance, Limits, LimitSubject, MeterLimit } from './types.js'

export const NO_SUBJECTS: readonly LimitSubject[] = []

/** The limiter's form of stored limits; null when none is set (an older cached record has none). */
export function limitsOf(
  stored: TenantLimits | null | undefined,
  grants?: TenantRecord['credits'] | undefined,
): Limits | null {
  if (stored === null || stored === undefined) return null
  const rate = stored.rate && { requests: stored.rate.requests, perSeconds: stored.rate.per_seconds }
  const monthlyQuota = stored.monthly_quota && quotaOf(stored.monthly_quota.requests, stored.monthly_quota)
  // A meter's N and M count its units; the limiter's limits call them `requests` either way.
  const meters: MeterLimit[] = []
  // In name order, as the policies are listed: jsonb keeps its keys shortest first.
  for (const [meter, limits] of Object.entries(stored.meters ?? {}).sort(([a], [b]) => (a < b ? -1 : 1)))
    meters.push({
      meter,
      rate: limits.rate && { requests: limits.rate.units, perSeconds: limits.rate.per_seconds },
      monthlyQuota: limits.monthly_quota && quotaOf(limits.monthly_quota.units, limits.monthly_quota),
    })
  const shadow = stored.shadow === undefined ? null : limitsOf(stored.shadow)
  const credits = creditsOf(stored.credits, grants)
  if (rate === null && monthlyQuota === null && meters.length === 0 && shadow === null && credits.length === 0)
    return null
  return {
    rate,
    monthlyQuota,
    ...(meters.length === 0 ? {} : { meters }),
    ...(credits.length === 0 ? {} : { credits }),
    ...(shadow === null ? {} : { shadow }),
  }
}

/**
 * Each credit limit with its grants, in name order. Which credits are in force (a meter's own
 * credit, else its plan's) is the choice of `stored.credits`, made before this.
 * A record read without its grants (cached by an older version) has none: the credits refuse until
 * it is read again, never admit blind.
 */
function creditsOf(stored: TenantLimits['credits'], grants: TenantRecord['credits']): CreditBalance[] {
  const credits: CreditBalance[] = []
  for (const [meter, credit] of Object.entries(stored ?? {}).sort(([a], [b]) => (a < b ? -1 : 1))) {
    const held = grants?.[meter]
    credits.push({
      meter,
      settled: held?.settled ?? 0,
      live: held?.live ?? [],
      lowThresholdPercent: credit.low_threshold_percent,
    })
  }
  return credits
}

function quotaOf(requests: number, { alert_thresholds }: { alert_thresholds?: number[] }) {
  return alert_thresholds === undefined ? { requests } : { requests, alertThresholds: alert_thresholds }
}

/** The subjects whose limits a request acting as `acting` must pass; empty when none has a limit. */
export async function limitSubjects(
  principal: Principal,
  acting: TenantRecord,
  lookups: TenancyLookups,
): Promise<readonly LimitSubject[]> {
  const subjects: LimitSubject[] = []
  let account: TenantRecord | null = acting
  if (acting.parentId !== null) {
    account = principal.tenant.id === acting.parentId ? principal.tenant : await lookups.tenant(acting.parentId)
    // Its plan's limits, read through the plan's own entry (docs/api.md, Plans): its own plan,
    // else its parent's default.
    const planId = acting.planId ?? account?.defaultPlanId ?? null
    const plan = planId === null ? null : await lookups.plan(planId)
    const own = limitsOf(effectiveLimits(acting.limits, plan?.limits), acting.credits)
    if (own !== null) subjects.push({ tenantId: acting.id, level: 'sub_account', limits: own })
  }
  const accountLimits = account === null ? null : limitsOf(account.limits)
  if (account !== null && accountLimits !== null)
    subjects.push({ tenantId: account.id, level: 'account', limits: accountLimits })
  return subjects.length === 0 ? NO_SUBJECTS : subjects
}
