// The tenant's and its account's limits (proxy/limit-gate.ts): the route's cost in units taken
// (request.routeCost, set by the admission step),
// given back if a later step refuses the request or its client leaves before it is forwarded.
import type { StepFactory } from '../options.js'

export const limitsStep: StepFactory = (route, { limits }) => {
  if (route.public) return null
  return {
    name: 'limits',
    check: (request, reply) => limits.check(request, reply, request.routeCost),
    undo: (request) => limits.refund(request),
  }
}
