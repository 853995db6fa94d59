// Wires authentication and the acting rules into fastify: an onRequest hook, so that both run
// before the body is read and before validation (DESIGN §4: 401, then the acting header, then 403).
import type { FastifyRequest, onRequestAsyncHookHandler } from 'fastify'
import { authenticate, requireActiveTenant, type Principal } from '../auth/authenticate.js'
import { ACTING_HEADER, parseActingHeader, resolveActingTenant } from './acting.js'
import type { TenancyLookups, TenantRecord } from './lookups.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** The key and the tenant that owns it; set once authentication passed. */
    principal: Principal | null
    /** The tenant this request acts as; set once the acting rules passed. */
    actingTenant: TenantRecord | null
  }
}

/** How many times a header was sent, counting repeats that Node folded into one value. */
function headerOccurrences(request: FastifyRequest, lowerCaseName: string): number {
  const raw = request.raw.rawHeaders
  let count = 0
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.toLowerCase() === lowerCaseName) count++
  return count
}

export function tenancyHook(lookups: TenancyLookups): onRequestAsyncHookHandler {
  return async function resolveTenancy(request) {
    const principal = await authenticate(request.headers.authorization, lookups, headerOccurrences(request, 'authorization'))
    request.principal = principal
    // DESIGN §4 order: 401, then the acting header (a malformed one is 400 even for a
    // deactivated key), then the 403s.
    const target = parseActingHeader(request.headers[ACTING_HEADER], headerOccurrences(request, ACTING_HEADER))
    requireActiveTenant(principal)
    request.actingTenant = await resolveActingTenant(principal, target, request.method, lookups)
  }
}
