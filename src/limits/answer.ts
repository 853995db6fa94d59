// What a limit's decision looks like to the client (docs/api.md, limits and quotas): the IETF
// RateLimit fields (draft-ietf-httpapi-ratelimit-headers) on every request under a limit, and the
// 429 of a refusal with the policies that refused it.
import type { FastifyReply } from 'fastify'
import { ApiError } from '../errors.js'
import type { Decision, PolicyState } from './types.js'

/** RateLimit-Policy lists every limit that applies; RateLimit gives the one closest to refusing. */
export function setRateLimitFields(reply: FastifyReply, decision: Decision): void {
  const policies = decision.policies
  if (policies.length === 0) return
  let closest: PolicyState = policies[0]!
  for (const policy of policies) if (policy.remaining < closest.remaining) closest = policy
  reply.header('ratelimit-policy', policies.map((p) => `"${p.name}";q=${p.quota};w=${p.windowSeconds}`).join(', '))
  reply.header(
    'ratelimit',
    `"${closest.name}";r=${Math.max(0, Math.floor(closest.remaining))};t=${Math.max(0, Math.ceil(closest.resetSeconds))}`,
  )
}

/**
 * Which kind of limit refused: a quota when one did (it lasts until the next month) or a sub-account's
 * credits (until a grant), else a rate.
 */
export function refusalKind(decision: Decision): 'rate' | 'quota' {
  return decision.violated.some((name) => name.endsWith('monthly_quota') || name.startsWith(CREDITS)) ? 'quota' : 'rate'
}

const CREDITS = 'sub_account.credits.'

/** The meters whose credits refused, or none. */
const spentMeters = (decision: Decision) =>
  decision.violated.filter((name) => name.startsWith(CREDITS)).map((name) => name.slice(CREDITS.length))

export function limitRefusal(decision: Decision): ApiError {
  // Not known to be over: the tenant's limits were not read in time. As an unknown key is while
  // the store cannot answer (docs/api.md), a 503 to retry, never a 429 that says it is over.
  if (decision.undecided)
    return new ApiError(
      'store_unavailable',
      `the limits of this request's tenant could not be read in time (${decision.violated.join(', ')}); retry in a second`,
      { headers: { 'retry-after': '1' } },
    )
  // Credits refuse with 402: no wait brings them back, a grant does.
  const meters = spentMeters(decision)
  if (meters.length > 0)
    return new ApiError(
      'credits_exhausted',
      `the prepaid credits of ${meters.map((m) => `\`${m}\``).join(', ')} are used up (${decision.violated.join(', ')}); a new grant restores them`,
      { extensions: { violated_policies: decision.violated, meters } },
    )
  const kind = refusalKind(decision)
  const code = kind === 'quota' ? 'quota_exceeded' : 'rate_limited'
  const detail =
    kind === 'quota'
      ? `this month's quota is used up (${decision.violated.join(', ')}); it renews on the 1st (UTC)`
      : `over the rate limit (${decision.violated.join(', ')}); retry after ${decision.retryAfterSeconds} s`
  return new ApiError(code, detail, {
    headers: { 'retry-after': String(decision.retryAfterSeconds) },
    extensions: { violated_policies: decision.violated },
  })
}
