// Each parent's rate on the management API (MANAGEMENT_RATE, docs/configuration.md), answered as
// a proxied route's limits are: the RateLimit fields, and 429 rate_limited naming
// `management.rate`. Checked after authorization, before the body and its validation. Unlike a
// tenant's limits, it lets calls through while Redis grants nothing yet (below).
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Rate } from './bucket.js'
import type { Limiter } from './limiter.js'
import type { Decision, LimitSubject } from './types.js'
import { limitRefusal, setRateLimitFields } from './answer.js'

/**
 * `parentOf` names the parent whose budget a call spends: the calling key's account, or (the
 * sub-account portal: portal/plugin.ts) the account of the portal session's sub-account.
 */
export function managementRate(
  limiter: Limiter,
  rate: Rate,
  parentOf: (request: FastifyRequest) => string = (request) => request.principal!.tenant.id,
) {
  const limits = { rate, monthlyQuota: null }
  return (request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) => {
    const subjects: LimitSubject[] = [{ tenantId: parentOf(request), level: 'management', limits }]
    const answer = (decision: Decision) => {
      setRateLimitFields(reply, decision)
      done(decision.allowed ? undefined : limitRefusal(decision))
    }
    // While Redis, just found empty (a fresh deployment, a restart), grants nothing for a few
    // seconds (docs/internals.md, limits), calls go through: the management API's rate protects
    // the store and bills nobody, and an operator's first calls must not fail.
    if (limiter.isWarm(subjects)) return limiter.inGrace(subjects) ? done() : answer(limiter.admit(subjects))
    // The call waits for Redis: a span of its trace, as the proxy's lease wait (proxy/limit-gate.ts).
    const span = request.trace?.work('limit lease', { operation: 'lease' })
    limiter
      .warm(subjects)
      .then(async () => {
        if (limiter.inGrace(subjects)) {
          span?.end()
          return done()
        }
        const decision = await limiter.admitWhenWarm(subjects)
        span?.end(decision.undecided ? 'store_unavailable' : undefined)
        answer(decision)
      })
      .catch((error: Error) => {
        span?.end('internal_error')
        done(error)
      })
  }
}
