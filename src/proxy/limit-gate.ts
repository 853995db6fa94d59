// The limits of a proxied request (docs/api.md, limits and quotas), the last check before its
// upstream slot: decided from the limiter's memory, the RateLimit fields set, a refusal answered
// 429 and counted for the tenant's usage report. A tenant without limits costs one length check.
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { ApiError } from '../errors.js'
import type { Limiter } from '../limits/limiter.js'
import type { Decision, LimitSubject, PolicyName } from '../limits/types.js'
import { type LimitMetrics, policyLabelIndex, shadowLabelIndex } from '../limits/metrics.js'
import type { UsageMeter } from '../usage/meter.js'
import { limitRefusal, refusalKind, setRateLimitFields } from '../limits/answer.js'
import type { RateAlerts } from '../alerts/rate-alerts.js'

export interface LimitGateOptions {
  limiter: Limiter
  meter: UsageMeter
  metrics: LimitMetrics
  /** Told of each refusal by a rate, for `rate_limit.exceeded` (alerts/rate-alerts.ts). */
  rateAlerts?: RateAlerts
}

declare module 'fastify' {
  interface FastifyRequest {
    /** Whether the limiter took units for this request (they are given back if it is refused later). */
    limitsCharged: boolean
    /** How many: its route's cost. */
    limitUnits: number
    /** The shadow limits that took nothing of it (a refund skips them); null: none. */
    limitsUntaken: readonly PolicyName[] | null
  }
}

export interface LimitGate {
  /**
   * undefined when every limit lets the request pass, else the 429; a promise when a limit is cold.
   * `units`: the request's cost (its route's), taken from every rate and quota.
   */
  check(
    request: FastifyRequest,
    reply: FastifyReply,
    units?: number,
  ): ApiError | undefined | Promise<ApiError | undefined>
  /**
   * The request was refused after its limits took their units (a busy route, a departed client):
   * it was not forwarded, so it does not count. Only where it certainly was not: a refund for a
   * request that went upstream after all would let one more through than the limit allows.
   */
  refund(request: FastifyRequest): void
  /**
   * Its answer ended: the units its upstream reported, charged to the limits of their meters
   * (limits in units). A request its limits did not admit, or gave back, is charged nothing.
   */
  charge(request: FastifyRequest): void
}

export function limitGate({ limiter, meter, metrics, rateAlerts }: LimitGateOptions): LimitGate {
  function count(decision: Decision): void {
    for (const policy of decision.policies) {
      const index = policyLabelIndex(policy.name)
      const refused = decision.violated.includes(policy.name)
      ;(refused ? metrics.refused : metrics.admitted)[index]!.inc()
    }
    if (decision.wouldRefuse !== undefined)
      for (const policy of decision.wouldRefuse) metrics.shadowRefused[shadowLabelIndex(policy)]!.inc()
  }

  function decide(request: FastifyRequest, reply: FastifyReply, decision: Decision): ApiError | undefined {
    // Not refused by a limit, nor counted as such: its limits were not read in time (a 503).
    if (decision.undecided) return limitRefusal(decision)
    count(decision)
    setRateLimitFields(reply, decision)
    if (!decision.allowed) {
      meter.limited(request.actingTenant!.id, refusalKind(decision))
      if (rateAlerts !== undefined) alertRates(rateAlerts, request.limitSubjects!, decision)
      return limitRefusal(decision)
    }
    request.limitsCharged = true
    request.limitsUntaken = decision.untaken ?? null
    request.limitsWouldRefuse = decision.wouldRefuse ?? null
    if (decision.wouldRefuse !== undefined && rateAlerts !== undefined)
      alertShadowRates(rateAlerts, request.limitSubjects!, decision.wouldRefuse)
    return undefined
  }

  return {
    check(request, reply, units = 1) {
      const subjects = request.limitSubjects
      if (subjects === null || subjects.length === 0) return undefined
      request.limitUnits = units
      if (limiter.isWarm(subjects, units)) return decide(request, reply, limiter.admit(subjects, units))
      // A limit this replica has not seen yet (or since its change), or whose lease a burst emptied
      // while Redis has units: a Redis round trip (bounded). Never one that is reached (starved).
      metrics.coldWaits.inc()
      const waitedFrom = performance.now()
      const span = request.trace?.work('limit lease', { operation: 'lease' })
      return limiter.admitWhenWarm(subjects, undefined, units).then(
        (decision) => {
          metrics.leaseWait.observe((performance.now() - waitedFrom) / 1_000)
          span?.end(decision.undecided ? 'store_unavailable' : undefined)
          return decide(request, reply, decision)
        },
        (error: unknown) => {
          span?.end('internal_error')
          throw error
        },
      )
    },
    refund(request) {
      if (!request.limitsCharged || request.limitSubjects === null) return
      request.limitsCharged = false
      limiter.refund(request.limitSubjects, request.limitUnits, request.limitsUntaken ?? undefined)
    },
    charge(request) {
      const reported = request.exchange?.reported
      const subjects = request.limitSubjects
      if (!request.limitsCharged || reported == null || subjects === null) return
      // Meters with limits, enforced or in shadow, or credits: else nothing to charge.
      if (
        subjects.some(
          ({ limits }) =>
            limits.meters !== undefined || limits.shadow?.meters !== undefined || limits.credits !== undefined,
        )
      )
        limiter.charge(subjects, reported)
    },
  }
}

/** Counts a refusal for each rate that refused it, for its tenant (the sub-account's, or the account's). */
function alertRates(alerts: RateAlerts, subjects: readonly LimitSubject[], decision: Decision): void {
  for (const subject of subjects) {
    const rate = subject.limits.rate
    if (rate === null || subject.level === 'management') continue
    const policy = subject.level === 'account' ? 'account.rate' : 'sub_account.rate'
    if (decision.violated.includes(policy)) alerts.refused(subject.tenantId, policy, rate)
  }
}

/** Counts what a shadow rate would have refused, for its `rate_limit.exceeded` with `shadow: true`. */
function alertShadowRates(
  alerts: RateAlerts,
  subjects: readonly LimitSubject[],
  wouldRefuse: readonly PolicyName[],
): void {
  for (const subject of subjects) {
    const rate = subject.limits.shadow?.rate
    if (rate == null || subject.level === 'management') continue
    const policy = subject.level === 'account' ? 'account.shadow.rate' : 'sub_account.shadow.rate'
    if (wouldRefuse.includes(policy)) alerts.refused(subject.tenantId, policy, rate)
  }
}
