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

/**
 * How many times the two headers that must come once were sent, in one pass over the raw
 * headers: Node keeps the first Authorization and folds repeated custom headers into one value.
 */
const AUTHORIZATION = 'authorization'

function singleHeaderCounts(request: FastifyRequest): { authorization: number; acting: number } {
  const raw = request.raw.rawHeaders
  const counts = { authorization: 0, acting: 0 }
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!
    // Lower-cased only when the length matches: this runs for every header of every request.
    if (name.length === AUTHORIZATION.length && name.toLowerCase() === AUTHORIZATION) counts.authorization++
    else if (name.length === ACTING_HEADER.length && name.toLowerCase() === ACTING_HEADER) counts.acting++
  }
  return counts
}

export function tenancyHook(lookups: TenancyLookups): onRequestAsyncHookHandler {
  return async function resolveTenancy(request) {
    const counts = singleHeaderCounts(request)
    const principal = await authenticate(request.headers.authorization, lookups, counts.authorization)
    request.principal = principal
    // DESIGN §4 order: 401, then the acting header (a malformed one is 400 even for a
    // deactivated key), then the 403s.
    const target = parseActingHeader(request.headers[ACTING_HEADER], counts.acting)
    requireActiveTenant(principal)
    request.actingTenant = await resolveActingTenant(principal, target, request.method, lookups)
  }
}
