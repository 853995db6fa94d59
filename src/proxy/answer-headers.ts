// What the gateway changes in an upstream's answer headers besides the hop-by-hop ones (headers.ts),
// docs/api.md, "What comes back": a Location that names the upstream is moved
// under the route's prefix, anything else passes as sent; a Set-Cookie holding `tgw_` anywhere is
// removed. Both run only when the answer carries the header. On a public route, unless it says
// `same_origin_documents: true`, every answer is sandboxed (PUBLIC_ROUTE_CSP), an upstream's own
// policy kept beside it. On a route with `cors`, the upstream's own Access-Control-* fields are
// dropped: the gateway's (cors/policy.ts, set on the reply before the checks) are the route's.
import type { IncomingHttpHeaders } from 'node:http'
import { isCorsField } from './cors/policy.js'

/**
 * The policy of every answer of a public route (docs/api.md, "What comes back"): a document it
 * renders runs its scripts, forms, popups and downloads, but in an opaque origin (no
 * `allow-same-origin`), so it cannot use the gateway origin's cookies, storage or service workers,
 * the console's and the portal's included. Set on the reply before the route's checks
 * (proxy/plugin.ts), so that the gateway's own refusals carry it too.
 */
export const PUBLIC_ROUTE_CSP = 'sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads'

/** A path (`/…`) or an absolute http(s) URL: the two kinds of Location that can name the upstream. */
const SCHEME = /^https?:/i

/**
 * A Set-Cookie that may set a cookie of the gateway's (`tgw_*`, portal/session-auth.ts): `tgw_`
 * anywhere in the value, in any case. Not the name as one browser reads it: browsers differ in
 * what they trim or skip before a name (Chromium read `\xA0tgw_portal=…` as `tgw_portal`, which a
 * pattern for blanks, prefixes, a nameless cookie and a folded comma let through), so no such
 * pattern can be complete. A value that merely holds `tgw_` (`a=tgw_x`, `Path=/tgw_`) goes too: a
 * superset of the rule, and no upstream has a reason to send one.
 */
const GATEWAY_COOKIE = /tgw_/i

/** Whether a Set-Cookie value sets, or may be read as setting, a cookie the gateway uses. */
export function setsGatewayCookie(setCookie: string): boolean {
  return GATEWAY_COOKIE.test(setCookie)
}

/**
 * The Set-Cookie values a client may get, each judged alone: the same value (no copy) when none
 * is the gateway's, null when none is left.
 */
export function cookiesForClient(setCookie: string | string[]): string | string[] | null {
  if (typeof setCookie === 'string') return setsGatewayCookie(setCookie) ? null : setCookie
  if (!setCookie.some(setsGatewayCookie)) return setCookie
  const kept = setCookie.filter((value) => !setsGatewayCookie(value))
  return kept.length === 0 ? null : kept
}

/** The answer-header rules of one route, built once when the route is registered. */
export class AnswerHeaders {
  /** The upstream's origin as URL writes it (lower-case host, no default port). */
  private readonly origin: string
  /** The origins of a route's other targets (proxy/upstreams/): a Location naming one is the upstream's too. */
  private readonly otherOrigins: readonly string[]

  /** The upstream's path that the route's prefix becomes (its base path, then the prefix). */
  private readonly upstreamPrefix: string
  /** The prefix as clients see it ('' for the catch-all). */
  private readonly publicPrefix: string
  /** The route's answers carry PUBLIC_ROUTE_CSP (a public route without `same_origin_documents`). */
  private readonly sandboxed: boolean
  /** The route has `cors`: the upstream's Access-Control-* fields go. */
  private readonly cors: boolean
  constructor(
    upstream: URL,
    upstreamPrefix: string,
    publicPrefix: string,
    sandboxed = false,
    otherOrigins: readonly string[] = [],
    cors = false,
  ) {
    this.cors = cors
    this.otherOrigins = otherOrigins
    this.upstreamPrefix = upstreamPrefix
    this.publicPrefix = publicPrefix
    this.origin = upstream.origin
    this.sandboxed = sandboxed
  }

  /** Applies the rules to `headers` (a fresh copy, headers.ts's downstreamHeaders). */
  apply(headers: IncomingHttpHeaders): void {
    // Read as they may come: undici gives a repeated header as an array, a single one as a string.
    const location = headers.location as string | string[] | undefined
    if (location !== undefined)
      headers.location = (
        typeof location === 'string' ? this.clientLocation(location) : location.map((l) => this.clientLocation(l))
      ) as string
    const cookies = headers['set-cookie'] as string | string[] | undefined
    if (cookies !== undefined) {
      const kept = cookiesForClient(cookies)
      // A deleted property slows the object, but this one is written out once, and rarely.
      if (kept === null) delete headers['set-cookie']
      else headers['set-cookie'] = kept as string[]
    }
    // An upstream's grant would widen the route's policy (or, for a refused origin, make one).
    if (this.cors) for (const name in headers) if (isCorsField(name)) delete headers[name]
    // The reply carries the sandbox already; an upstream's own policy would replace it, so both
    // go, theirs first (a browser enforces every policy it gets).
    if (this.sandboxed) {
      const policy = headers['content-security-policy'] as string | string[] | undefined
      if (policy !== undefined)
        headers['content-security-policy'] = (typeof policy === 'string'
          ? [policy, PUBLIC_ROUTE_CSP]
          : [...policy, PUBLIC_ROUTE_CSP]) as unknown as string
    }
  }

  /**
   * The Location a client gets. A path under the upstream's prefix, at a segment boundary, or an
   * absolute URL of the upstream's own origin there, is moved under the route's prefix; anything
   * else (a relative reference, another origin, a protocol-relative `//host/…`, a path elsewhere
   * on the upstream) passes byte for byte. Dot segments and backslashes are read as a browser
   * reads them, so `/base/../admin` is not under `/base`.
   */
  clientLocation(location: string): string {
    const first = location.charCodeAt(0)
    const isPath = first === 47 /* / */
    if (isPath) {
      // `//host/…` and `/\host/…` name another host; and where the prefix maps to itself, a path is already the client's.
      const second = location.charCodeAt(1)
      if (second === 47 || second === 92 /* \ */ || this.upstreamPrefix === this.publicPrefix) return location
    } else if (!SCHEME.test(location)) return location
    let url: URL
    try {
      url = new URL(location, this.origin)
    } catch {
      return location
    }
    if (
      (url.origin !== this.origin && !this.otherOrigins.includes(url.origin)) ||
      url.username !== '' ||
      url.password !== ''
    )
      return location
    const path = url.pathname
    const prefix = this.upstreamPrefix
    if (!path.startsWith(prefix) || (path.length !== prefix.length && path.charCodeAt(prefix.length) !== 47))
      return location
    const moved = this.publicPrefix + path.slice(prefix.length)
    return (moved === '' ? '/' : moved) + url.search + url.hash
  }
}
