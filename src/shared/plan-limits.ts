// A sub-account's effective limits (docs/api.md, Plans): decided kind by kind, its own where it
// sets that kind, else its plan's. A kind is the rate, the monthly quota, each meter's rate and
// its monthly quota, each meter's credit, and each of the same in `shadow`; so a plan's meter quota still holds for a
// sub-account that sets only its own rate. Plain functions over the stored forms, used by the
// answers of the API and by the limiter's subjects alike, so that what is shown is what is enforced.
import {
  creditsInForce,
  type MeterLimits,
  type ShadowLimits,
  storedLimits,
  type TenantLimits,
} from './tenant-limits.js'

/**
 * The limits in force for a tenant whose own are `own` under a plan whose limits are `plan` (null:
 * no plan, or a plan without limits), in the stored form: null when no kind is set by either.
 */
export function effectiveLimits(
  own: TenantLimits | null | undefined,
  plan: TenantLimits | null | undefined,
): TenantLimits | null {
  if (plan == null) return own ?? null
  if (own == null) return plan
  const ownShadow = own.shadow ?? null
  const planShadow = plan.shadow ?? null
  const shadow =
    ownShadow === null && planShadow === null
      ? undefined
      : mergedMembers(
          ownShadow ?? { rate: null, monthly_quota: null },
          planShadow ?? { rate: null, monthly_quota: null },
        )
  const credits = creditsInForce(own.credits, plan.credits)
  return storedLimits({
    ...mergedMembers(own, plan),
    ...(shadow === undefined ? {} : { shadow }),
    ...(credits === null ? {} : { credits }),
  })
}

function mergedMembers(own: ShadowLimits, plan: ShadowLimits): ShadowLimits {
  const meters: Record<string, MeterLimits> = {}
  for (const name of new Set([...Object.keys(plan.meters ?? {}), ...Object.keys(own.meters ?? {})])) {
    const mine = own.meters?.[name]
    const theirs = plan.meters?.[name]
    meters[name] = {
      rate: mine?.rate ?? theirs?.rate ?? null,
      monthly_quota: mine?.monthly_quota ?? theirs?.monthly_quota ?? null,
    }
  }
  return {
    rate: own.rate ?? plan.rate,
    monthly_quota: own.monthly_quota ?? plan.monthly_quota,
    meters,
  }
}
