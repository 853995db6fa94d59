// The last step of a WebSocket upgrade, once every check has passed: a place under the route's
// `max_websockets_per_tenant` and one under its `max_websockets_per_account` (429 past either),
// then the upstream's socket, opened before the client is answered (websocket/upgrade.ts). What it
// takes goes back if the upgrade goes no further.
import type { FastifyRequest } from 'fastify'
import { ApiError } from '../../errors.js'
import type { StepFactory } from '../options.js'
import type { Verdict } from '../pipeline.js'
import { trustedIdentity } from '../headers.js'
import type { PlaceRefusal } from '../websocket/open-sockets.js'
import { dialUpstream, upgradeHeaders, upgradeOf } from '../websocket/upgrade.js'
import { isUpgrade } from '../../http/upgrade-request.js'

export const websocketConnectStep: StepFactory = (route, { webSockets, upstreamTargets }) => {
  const options = route.websocket
  if (options === null || webSockets === undefined || webSockets === null) return null
  // A route with targets or cells: the socket goes to one its balancer picks (proxy/upstreams/),
  // among its cell's.
  const balancer = route.targets === null && route.cells === null ? undefined : upstreamTargets?.get(route.prefix)
  const maxPerAccount = options.maxPerAccount ?? webSockets.defaultMaxPerAccount
  const tooMany = (refusal: PlaceRefusal) =>
    new ApiError(
      'too_many_concurrent_requests',
      refusal === 'tenant'
        ? `this tenant already has ${options.maxPerTenant} WebSockets open on this route`
        : `this account and its sub-accounts already have ${maxPerAccount} WebSockets open on this route`,
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
      // A public route has no tenant, and so no places.
      if (tenantId !== null) {
        const keyTenant = request.principal!.tenant
        const holder = { tenantId, accountId: keyTenant.parentId ?? keyTenant.id }
        const refusal = webSockets.sockets.reserve(route.prefix, holder, options.maxPerTenant, maxPerAccount)
        if (refusal !== null) return tooMany(refusal)
        upgrade.place = holder
      }
      const identity = route.public ? null : trustedIdentity(request)
      let dialled: Promise<Verdict>
      try {
        const target = balancer?.socketTarget(tenantId ?? undefined, request.cell)
        dialled = dialUpstream(
          request,
          reply,
          route,
          upgrade,
          upgradeHeaders(request, route, upgrade, identity),
          target,
        )
      } catch (error) {
        // A throw is the request's 500 (pipeline.ts), which undoes only the steps before this one:
        // the place this step took goes back here, or it would be held until the process ends.
        giveBack(request)
        throw error
      }
      return dialled.then((verdict) => {
        if (verdict === undefined) webSockets.awaitHandshake(reply, route, upgrade)
        else giveBack(request)
        return verdict
      })
    },
  }
}
