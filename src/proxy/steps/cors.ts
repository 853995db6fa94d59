// A route with `cors` (docs/api.md, Browsers on other origins). A preflight is the browser's
// question, not a call: it carries no key, so it is answered here, before the key is asked for,
// 204 or 403 cors_refused, never forwarded and counted nowhere (it has no principal, so neither
// usage nor the request log sees it, and it never reaches the limits). Any other request gets its
// CORS fields on the reply now, so that every later refusal (401, 403, 429, 5xx) carries them as
// the upstream's answer does. A WebSocket upgrade is left alone: browsers apply no CORS to it.
// A decision (AUTHZ_PORT) answers no preflight: see `corsDecisionStep`.
import type { FastifyReply } from 'fastify'
import { ApiError } from '../../errors.js'
import { asksForWebSocket, isUpgrade } from '../../http/upgrade-request.js'
import { actualAnswerHeaders, decidePreflight, isPreflight } from '../cors/policy.js'
import type { StepFactory } from '../options.js'
import { ANSWERED, type ProxyStep } from '../pipeline.js'
import type { ProxyRoute } from '../route.js'

function answerPreflight(
  reply: FastifyReply,
  headers: Record<string, string | number | string[] | undefined>,
): typeof ANSWERED {
  reply.headers(headers).code(204).send()
  return ANSWERED
}

/** The step on PORT: a preflight answered here. */
export const corsStep: StepFactory = (route) => corsFor(route, true)

/**
 * The step in a decision (checks.ts, DECISION_STEPS). The asking proxy reads any 2xx as "allow"
 * and would send the preflight on to its upstream, keyless, past every rule; nor can it hand our
 * 204 to the browser. So a preflight is decided as any request is (without a key, 401), and the
 * proxy in front answers preflights itself (docs/forward-auth.md, Browsers on other origins; decision 0388).
 */
export const corsDecisionStep: StepFactory = (route) => corsFor(route, false)

function corsFor(route: ProxyRoute, answersPreflights: boolean): ProxyStep | null {
  const cors = route.cors
  if (cors === null) return null
  return {
    name: 'cors',
    check(request, reply) {
      const headers = request.headers
      if (answersPreflights && isPreflight(request.method, headers)) {
        const decision = decidePreflight(cors, headers, route.prefix)
        return decision.allowed
          ? answerPreflight(reply, decision.headers)
          : new ApiError('cors_refused', decision.reason)
      }
      if (isUpgrade(request.raw) || asksForWebSocket(headers.upgrade)) return undefined
      reply.headers(actualAnswerHeaders(cors, headers.origin))
      return undefined
    },
  }
}
