// The limits of a proxied request (docs/api.md, limits and quotas), the last check before its
// upstream slot: decided from the limiter's memory, the RateLimit fields set, a refusal answered
// 429 and counted for the tenant's usage report. A tenant without limits costs one length check.
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Limiter } from '../limits/limiter.js'
import type { Decision } from '../limits/types.js'
import { LIMIT_POLICIES, type LimitMetrics } from '../ops/metrics.js'
import type { UsageMeter } from '../usage/meter.js'
import { limitRefusal, refusalKind, setRateLimitFields } from './limit-answer.js'

export interface LimitGateOptions {
  limiter: Limiter
  meter: UsageMeter
  metrics: LimitMetrics
}

type Done = (err?: Error) => void

declare module 'fastify' {
  interface FastifyRequest {
    /** Whether the limiter took units for this request (they are given back if it is refused later). */
    limitsCharged: boolean
  }
}

export interface LimitGate {
  /** Calls `next` when every limit lets the request pass; else answers through `done`. */
  check(request: FastifyRequest, reply: FastifyReply, done: Done, next: () => void): void
  /**
   * The request was refused after its limits took their units (a busy route, a departed client):
   * it was not forwarded, so it does not count. Only where it certainly was not: a refund for a
   * request that went upstream after all would let one more through than the limit allows.
   */
  refund(request: FastifyRequest): void
}

export function limitGate({ limiter, meter, metrics }: LimitGateOptions): LimitGate {
  function count(decision: Decision): void {
    for (const policy of decision.policies) {
      const index = LIMIT_POLICIES.indexOf(policy.name)
      const refused = decision.violated.includes(policy.name)
      ;(refused ? metrics.refused : metrics.admitted)[index]!.inc()
    }
  }

  function decide(request: FastifyRequest, reply: FastifyReply, decision: Decision, done: Done, next: () => void) {
    count(decision)
    setRateLimitFields(reply, decision)
    if (!decision.allowed) {
      meter.limited(request.actingTenant!.id, refusalKind(decision))
      return done(limitRefusal(decision))
    }
    request.limitsCharged = true
    next()
  }

  return {
    check(request, reply, done, next) {
      const subjects = request.limitSubjects
      if (subjects === null || subjects.length === 0) return next()
      if (limiter.isWarm(subjects)) return decide(request, reply, limiter.admit(subjects), done, next)
      // A limit this replica has not seen yet, or whose lease ran dry: a Redis round trip (bounded).
      metrics.coldWaits.inc()
      limiter.admitWhenWarm(subjects).then((decision) => decide(request, reply, decision, done, next), done)
    },
    refund(request) {
      if (!request.limitsCharged || request.limitSubjects === null) return
      request.limitsCharged = false
      limiter.refund(request.limitSubjects)
    },
  }
}
