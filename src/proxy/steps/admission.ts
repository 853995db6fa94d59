// The key and the acting rules (tenancy/): request.principal, actingTenant and limitSubjects set,
// or the refusal. Most requests repeat one of the last second's admissions and pass without a
// promise; the rest go through the caches.
import { tenancyAdmission } from '../../tenancy/recent-admissions.js'
import type { StepFactory } from '../options.js'
import { decisionOf } from '../../http/decision-mark.js'

export const admissionStep: StepFactory = (route, { lookups, recentAdmissions }) => {
  if (route.public) return null
  const admission = tenancyAdmission(lookups)
  return {
    name: 'admission',
    check(request) {
      // For the request log: which route, known before any refusal.
      request.routePrefix = route.prefix
      // A decision may name its own cost (/verify's `cost`), taken and counted as the route's would be.
      request.routeCost = decisionOf(request.raw)?.cost ?? route.cost
      if (admission.fromRecent(request)) {
        recentAdmissions.inc()
        return undefined
      }
      return admission.resolve(request).then(() => undefined)
    },
  }
}
