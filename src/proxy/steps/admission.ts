// The key and the acting rules (tenancy/): request.principal, actingTenant and limitSubjects set,
// or the refusal. Most requests repeat one of the last second's admissions and pass without a
// promise; the rest go through the caches.
import { tenancyAdmission } from '../../tenancy/recent-admissions.js'
import type { StepFactory } from '../options.js'

export const admissionStep: StepFactory = (route, { lookups, recentAdmissions }) => {
  if (route.public) return null
  const admission = tenancyAdmission(lookups)
  return {
    name: 'admission',
    check(request) {
      // For the request log: which route, known before any refusal.
      request.routePrefix = route.prefix
      request.routeCost = route.cost
      if (admission.fromRecent(request)) {
        recentAdmissions.inc()
        return undefined
      }
      return admission.resolve(request).then(() => undefined)
    },
  }
}
