// A WebSocket upgrade (docs/api.md, WebSockets). On a route with `websocket: true`, before the
// tenancy check: checked as a WebSocket handshake, its `tgw.bearer.` subprotocol taken as the
// credential when there is no Authorization. On any other route, once the key is known:
// 400 websocket_not_enabled (a caller without a valid key learns nothing of the route but 401).
// A request that is not an upgrade passes with a property read or two.
import { ApiError } from '../../errors.js'
import type { StepFactory } from '../options.js'
import { beginUpgrade, handshakeProblem } from '../websocket/upgrade.js'
import { asksForWebSocket, isUpgrade } from '../../http/upgrade-request.js'

function notEnabled(prefix: string): ApiError {
  return new ApiError('websocket_not_enabled', `the route ${prefix} does not carry WebSockets`)
}

export const websocketUpgradeStep: StepFactory = (route) => {
  if (route.websocket === null) return null
  return {
    name: 'websocket upgrade',
    check(request) {
      if (!isUpgrade(request.raw)) return undefined
      return handshakeProblem(request) ?? beginUpgrade(request)
    },
  }
}

export const websocketRefusalStep: StepFactory = (route) => {
  if (route.websocket !== null) return null
  return {
    name: 'websocket refusal',
    // Node flags an upgrade only when some route listens for them; without one, the header tells.
    check(request) {
      if (!isUpgrade(request.raw) && !asksForWebSocket(request.headers.upgrade)) return undefined
      return notEnabled(route.prefix)
    },
  }
}
