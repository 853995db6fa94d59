// A route as the proxy uses it (docs/configuration.md, routes): its upstream, scopes, limits and
// options, and the scopes a method needs on it. Apart from route-table.ts, which makes the routes
// at boot: the request path's files read a route and need none of the parsing.
import type { RouteIdentity } from '../identity/route-identity.js'
import type { RouteCors } from './cors/route-options.js'
import type { RouteCells } from './upstreams/route-cells.js'
import type { RetryOptions } from './upstreams/retry-options.js'
import type { RouteTargets } from './upstreams/route-options.js'
import type { RouteWebSocket } from './websocket/route-options.js'

export interface ProxyRoute {
  /** `/` for the catch-all; otherwise whole segments, no trailing slash. */
  readonly prefix: string
  /**
   * http or https origin, optionally with a base path that the forwarded path is appended to.
   * null: the route is only decided for (AUTHZ_PORT); on PORT its paths are 404 route_not_found.
   */
  readonly upstream: string | null
  /**
   * Several targets, balanced and watched (upstreams/); null on a route with one `upstream`. With
   * targets, `upstream` is the first target's URL: their scheme and base path are the same.
   */
  readonly targets: RouteTargets | null
  /**
   * Named sets of targets, each serving the tenants placed in it (steps/cell.ts), and the route's
   * default cell; null on a route without cells. `upstream` and `targets` beside them serve a
   * tenant placed nowhere, when there is no default cell.
   */
  readonly cells: RouteCells | null
  /** When a failed upstream request is sent again (upstreams/retry-call.ts), with one upstream or targets. */
  readonly retries: RetryOptions
  /** Scopes a key needs here: `read` for GET, HEAD and OPTIONS, `write` for every other method. */
  readonly scopes: { readonly read: readonly string[]; readonly write: readonly string[] }
  /** No key needed: X-Service-* are still stripped, nothing is injected, nothing is counted. */
  readonly public: boolean
  /**
   * A public route's answers are not sandboxed (`same_origin_documents: true`): its pages run on
   * the gateway's origin, with its cookies and storage. Always false on a keyed route, whose
   * answers no browser can load as a document (a navigation carries no Authorization).
   */
  readonly sameOriginDocuments: boolean
  readonly forwardAuthorization: boolean
  /** How long the upstream may take to send its headers, and then between body chunks. */
  readonly timeoutMs: number
  /** Largest request body streamed to the upstream. */
  readonly maxBodyBytes: number
  /** Headers the gateway drops by default that this route's upstream gets (never X-Service-*). */
  readonly passHeaders: ReadonlySet<string>
  /** Requests in flight to the upstream at once; past it a request waits up to timeoutMs, then 503. */
  readonly maxConnections: number
  /** Requests one resolved tenant may have in flight here; past it, 429 at once. */
  readonly maxConnectionsPerTenant: number
  /** Requests of one parent account's keys (its own and its sub-accounts') in flight here; past it, 429. */
  readonly maxConnectionsPerAccount: number
  /** How long a request body may send nothing before the exchange ends (408). */
  readonly bodyIdleTimeoutMs: number
  /** How long a client may read nothing of a response before it is cut off. */
  readonly responseIdleTimeoutMs: number
  /** Sign the request's identity for the upstream (X-Service-Identity); null: no assertion. */
  readonly identity: RouteIdentity | null
  /** WebSocket upgrades proxied (`websocket: true`) and their bounds; null: an upgrade is refused (400). */
  readonly websocket: RouteWebSocket | null
  /** Request units one forwarded request counts for (the `requests` meter), 1 to 10^6. */
  readonly cost: number
  /** Units the upstream reports in a response header or trailer, per meter (route-meters.ts). */
  readonly meters: readonly RouteMeter[]
  /** Pages of other origins may call the route from a browser (cors/); null: no CORS field, a preflight is a request like any. */
  readonly cors: RouteCors | null
}

/** A meter a route's upstream reports (docs/configuration.md, routes: `meters`). */
export interface RouteMeter {
  /** `[a-z][a-z0-9_]{0,31}`, never `requests`. */
  readonly name: string
  /** The response header, or trailer of a streamed answer, that carries the units (lower case). */
  readonly header: string
  /** The client sees the header or trailer too; by default it is removed. */
  readonly expose: boolean
}

/** Scopes a request with this method needs on this route. */
export function scopesFor(route: ProxyRoute, method: string): readonly string[] {
  return method === 'GET' || method === 'HEAD' || method === 'OPTIONS' ? route.scopes.read : route.scopes.write
}
