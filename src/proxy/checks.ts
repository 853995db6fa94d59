// The proxy's checks, in the order they run (docs/api.md gives the order of its refusals). A new
// check is a file under steps/ and a line here: put it before the first step that takes something
// it would have to give back (limits, slot), or give its own `undo`.
import type { ProxyStep } from './pipeline.js'
import type { StepFactory, ProxyOptions } from './options.js'
import type { ProxyRoute } from './route.js'
import { admissionStep } from './steps/admission.js'
import { corsStep } from './steps/cors.js'
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

/** The steps a route's requests pass, built once when the route is registered. */
export function stepsFor(route: ProxyRoute, options: ProxyOptions): ProxyStep[] {
  const steps: ProxyStep[] = []
  for (const make of PROXY_STEPS) {
    const step = make(route, options)
    if (step !== null) steps.push(step)
  }
  return steps
}
