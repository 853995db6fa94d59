// A route without an upstream is only decided for (AUTHZ_PORT, docs/forward-auth.md): on PORT its
// paths are 404 route_not_found, as a path of no route is, and never fall to a shorter prefix.
import { routeNotFound } from '../../errors.js'
import { pathOf } from '../../http/bad-paths.js'
import { decisionOf } from '../../http/decision-mark.js'
import type { StepFactory } from '../options.js'

export const decidedOnlyStep: StepFactory = (route) => {
  if (route.upstream !== null) return null
  return {
    name: 'decided only',
    check: (request) =>
      decisionOf(request.raw) === null ? routeNotFound(request.method, pathOf(request.url)) : undefined,
  }
}
