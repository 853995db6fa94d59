// The proxy's checks, in the order they run (docs/api.md gives the order of its refusals). A new
// check is a file under steps/ and a line here: put it before the first step that takes something
// it would have to give back (limits, slot), or give its own `undo`.
import type { ProxyStep } from './pipeline.js'
import type { StepFactory, ProxyOptions } from './options.js'
import type { ProxyRoute } from './route.js'
import { decidedOnlyStep } from './steps/decided-only.js'
import { admissionStep } from './steps/admission.js'
import { corsDecisionStep, corsStep } from './steps/cors.js'
import { cellStep } from './steps/cell.js'
import { declaredBodyStep } from './steps/declared-body.js'
import { identityStep } from './steps/identity.js'
import { ipAllowlistStep } from './steps/ip-allowlist.js'
import { limitsStep } from './steps/limits.js'
import { prefixShadowStep } from './steps/prefix-shadow.js'
import { reservedPathStep } from './steps/reserved-path.js'
import { scopesStep } from './steps/scopes.js'
import { sendContinueStep } from './steps/send-continue.js'
import { serviceWorkerStep } from './steps/service-worker.js'
import { slotStep } from './steps/slot.js'
import { websocketConnectStep } from './steps/websocket-connect.js'
import { websocketRefusalStep, websocketUpgradeStep } from './steps/websocket-upgrade.js'

export const PROXY_STEPS: readonly StepFactory[] = [
  decidedOnlyStep,
  reservedPathStep,
  prefixShadowStep,
  corsStep,
  serviceWorkerStep,
  websocketUpgradeStep,
  admissionStep,
  ipAllowlistStep,
  websocketRefusalStep,
  scopesStep,
  cellStep,
  identityStep,
  declaredBodyStep,
  limitsStep,
  slotStep,
  sendContinueStep,
  websocketConnectStep,
]

/**
 * The steps a decision passes (proxy/decision.ts): the proxy's own, in the same order, but for
 * those that need the exchange itself. The asking proxy holds the connection to its upstream, so
 * no slot is taken (the route's concurrency caps do not apply), nor a body read (no 100 Continue,
 * no declared length to judge), nor a WebSocket opened (the asking proxy upgrades). A route
 * without WebSockets still refuses an upgrade, as on PORT.
 */
const EXCHANGE_ONLY: ReadonlySet<StepFactory> = new Set([
  websocketUpgradeStep,
  declaredBodyStep,
  slotStep,
  sendContinueStep,
  websocketConnectStep,
])

/**
 * Steps a decision runs otherwise: a preflight, answered 204 on PORT, would be an allow to the
 * asking proxy (steps/cors.ts, `corsDecisionStep`). No step of a decision answers by itself: an
 * allow is `answerDecision`'s alone (decision.ts).
 */
const IN_DECISIONS: ReadonlyMap<StepFactory, StepFactory> = new Map([[corsStep, corsDecisionStep]])

export const DECISION_STEPS: readonly StepFactory[] = PROXY_STEPS.filter((make) => !EXCHANGE_ONLY.has(make)).map(
  (make) => IN_DECISIONS.get(make) ?? make,
)

/** The steps a route's requests pass (or its decisions, from DECISION_STEPS), built once when the route is registered. */
export function stepsFor(
  route: ProxyRoute,
  options: ProxyOptions,
  factories: readonly StepFactory[] = PROXY_STEPS,
): ProxyStep[] {
  const steps: ProxyStep[] = []
  for (const make of factories) {
    const step = make(route, options)
    if (step !== null) steps.push(step)
  }
  return steps
}
