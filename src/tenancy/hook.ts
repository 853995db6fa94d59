// Wires authentication and the acting rules into fastify: an onRequest hook, so that both run
// before the body is read and before validation (docs/api.md: 401, then the acting header, then
// 403). The proxy's variant, which remembers the last second's admissions, is recent-admissions.ts.
// With tracing on, the lookups' store calls are the request's spans (their traced view).
import type { FastifyRequest, onRequestAsyncHookHandler } from 'fastify'
import { authenticate } from '../auth/authenticate.js'
import { keyRefusedBy, requireActiveTenant, type Principal } from '../auth/principal.js'
import { singleHeaderCounts, type SingleHeaderCounts } from '../http/header-counts.js'
import { parseActingHeader, resolveActingTenant } from './acting.js'
import { ACTING_HEADER } from '../shared/header-names.js'
import type { KeyRecord, TenancyLookups, TenantRecord } from '../shared/tenancy-records.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** The key and the tenant that owns it; set once authentication passed. */
    principal: Principal | null
    /** The tenant this request acts as; set once the acting rules passed. */
    actingTenant: TenantRecord | null
    /** The key of a 401 for a key that exists (revoked, expired), for the request log. */
    refusedKey: KeyRecord | null
  }
}

/** Resolves the principal and acting tenant of a request, then sets them on it (docs/api.md order). */
export async function resolveInto(
  request: FastifyRequest,
  untraced: TenancyLookups,
  counts: SingleHeaderCounts,
): Promise<void> {
  // With tracing on, the store calls the lookups make for a sampled request are its spans. An
  // unsampled one's would record nothing: no traced view (its closures) is made for it.
  const trace = request.trace
  const lookups = trace === null || !trace.sampled || untraced.traced === undefined ? untraced : untraced.traced(trace)
  let principal: Principal
  try {
    principal = await authenticate(
      request.headers.authorization,
      lookups,
      counts.authorization,
      request.server.accessTokens,
    )
  } catch (error) {
    request.refusedKey = keyRefusedBy(error) ?? null
    throw error
  }
  request.principal = principal
  // docs/api.md order: 401, then the acting header (a malformed one is 400 even for a
  // deactivated key), then the 403s.
  const target = parseActingHeader(request.headers[ACTING_HEADER], counts.acting)
  requireActiveTenant(principal)
  request.actingTenant = await resolveActingTenant(principal, target, request.method, lookups)
}

export function tenancyHook(lookups: TenancyLookups): onRequestAsyncHookHandler {
  return async function resolveTenancy(request) {
    await resolveInto(request, lookups, singleHeaderCounts(request))
  }
}
