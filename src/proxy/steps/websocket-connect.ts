// The last step of a WebSocket upgrade, once every check has passed: a place under the route's
// `max_websockets_per_tenant` (429 past it), then the upstream's socket, opened before the client
// is answered (websocket/upgrade.ts). What it takes goes back if the upgrade goes no further.
import type { FastifyRequest } from 'fastify'
import { ApiError } from '../../errors.js'
import type { StepFactory } from '../checks.js'
import { trustedIdentity } from '../headers.js'
import { dialUpstream, isUpgrade, upgradeHeaders, upgradeOf } from '../websocket/upgrade.js'

export const websocketConnectStep: StepFactory = (route, { webSockets }) => {
  const options = route.websocket
  if (options === null || webSockets === undefined || webSockets === null) return null
  const tooMany = () =>
    new ApiError(
      'too_many_concurrent_requests',
      `this tenant already has ${options.maxPerTenant} WebSockets open on this route`,
      { headers: { 'retry-after': '1' } },
    )
  const giveBack = (request: FastifyRequest) => {
    const upgrade = upgradeOf(request.raw)
    if (upgrade?.place == null) return
    webSockets.sockets.unreserve(route.prefix, upgrade.place)
    upgrade.place = null
  }
  return {
    name: 'websocket connect',
    check(request, reply) {
      if (!isUpgrade(request.raw)) return undefined
      const upgrade = upgradeOf(request.raw)!
      const tenantId = request.actingTenant?.id ?? null
      if (tenantId !== null) {
        if (!webSockets.sockets.reserve(route.prefix, tenantId, options.maxPerTenant)) return tooMany()
        upgrade.place = tenantId
      }
      const identity = route.public ? null : trustedIdentity(request)
      return dialUpstream(request, reply, route, upgrade, upgradeHeaders(request, route, upgrade, identity)).then(
        (verdict) => {
          if (verdict === undefined) webSockets.awaitHandshake(reply, route, upgrade)
          else giveBack(request)
          return verdict
        },
      )
    },
  }
}
