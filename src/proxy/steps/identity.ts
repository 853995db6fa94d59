// The signed identity for a route with `identity` (X-Service-Identity, docs/credentials.md).
// Signed before the limits take anything: a signing that fails then has nothing to give back.
import type { FastifyRequest } from 'fastify'
import type { StepFactory } from '../options.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** The signed identity for the upstream (X-Service-Identity), on a route with `identity`. */
    serviceIdentity: string | null
  }
}

export const identityStep: StepFactory = (route, { identity }) => {
  if (route.public || route.identity === null || identity === null) return null
  const assertionFor = identity.forRoute(route.identity)
  return {
    name: 'identity',
    check(request: FastifyRequest) {
      const assertion = assertionFor(request.principal!, request.actingTenant!)
      if (typeof assertion === 'string') {
        request.serviceIdentity = assertion
        return undefined
      }
      return assertion.then((token) => {
        request.serviceIdentity = token
        return undefined
      })
    },
  }
}
