// The route's scopes for the method, against the admitted key's (docs/configuration.md, routes).
import { insufficientScope } from '../../shared/scopes.js'
import type { StepFactory } from '../options.js'
import { scopesFor } from '../route.js'

export const scopesStep: StepFactory = (route) => {
  if (route.public) return null
  return {
    name: 'scopes',
    check: (request) => insufficientScope(request.principal!.key.scopes, scopesFor(route, request.method)),
  }
}
