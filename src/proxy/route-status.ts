// The proxied routes as the management API lists them (GET /v1/sub-accounts/routes, docs/api.md)
// for the console's Routes screen: what a key needs on each, whether browsers on other origins may
// call it, and, on a route with targets, each target's state now and whether the route is in panic.
// Read when asked, from the balancers the proxy keeps (upstreams/): each replica answers for itself.
import type { ProxyRoute } from './route.js'
import type { TargetState, TargetStatus, UpstreamsReadout } from './upstreams/route-upstreams.js'

/** One target, by its place in the route table: never its URL, which is the operator's business. */
export interface TargetView {
  /** 1 for the first target of its cell (or of the route's own targets). */
  readonly position: number
  readonly weight: number
  /** The cell the target serves; null for the route's own targets. */
  readonly cell: string | null
  readonly state: TargetState
}

export interface RouteStatus {
  readonly prefix: string
  readonly public: boolean
  readonly scopes: { readonly read: readonly string[]; readonly write: readonly string[] }
  readonly websocket: boolean
  /** The origins whose pages may call it from a browser (`["*"]`: any); null without `cors`. */
  readonly cors: { readonly origins: readonly string[]; readonly credentials: boolean } | null
  /**
   * `upstream`: one upstream, not watched (targets empty); `cells`: cells alone, each balancing its
   * own targets; otherwise the route's `balance`.
   */
  readonly balance: 'upstream' | 'cells' | 'least_request' | 'round_robin' | 'tenant_hash'
  readonly targets: readonly TargetView[]
  /** Every target is out, so requests go to all of them (tgw_upstream_panic). */
  readonly panic: boolean
}

/** The routes' status now; `upstreams` is the proxy's map of each balanced route's targets, by prefix. */
export function routeStatuses(
  routes: readonly ProxyRoute[],
  upstreams: ReadonlyMap<string, UpstreamsReadout>,
): RouteStatus[] {
  return routes.map((route) => {
    const balanced = route.targets === null && route.cells === null ? undefined : upstreams.get(route.prefix)
    return {
      prefix: route.prefix,
      public: route.public,
      scopes: route.scopes,
      websocket: route.websocket !== null,
      cors: route.cors && { origins: route.cors.originList, credentials: route.cors.credentials },
      balance: route.targets?.balance ?? (route.cells === null ? 'upstream' : 'cells'),
      targets: balanced === undefined ? [] : byPlace(balanced.readStates()),
      panic: balanced?.panic() ?? false,
    }
  })
}

/** Numbers each target by its place among its cell's (or the route's own) targets. */
function byPlace(states: readonly TargetStatus[]): TargetView[] {
  const counts = new Map<string | null, number>()
  return states.map(({ weight, cell, state }) => {
    const position = (counts.get(cell) ?? 0) + 1
    counts.set(cell, position)
    return { position, weight, cell, state }
  })
}
