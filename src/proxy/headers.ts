// What the upstream receives (docs/api.md): no client-sent X-Service-* header, whatever its case,
// count or spelling, no header that would change the method or path an upstream sees, then the
// trusted headers naming the resolved tenant, and its signed form on a route that asks for it.
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http'
import type { FastifyRequest } from 'fastify'

export const TRUSTED_PREFIX = 'x-service-'

/** The cell that serves the request (docs/api.md, Cells), on a route with cells: the gateway's alone. */
export const CELL_HEADER = 'x-service-cell'

/** Who the request acts as; null on a public route, where nothing is injected. */
export interface TrustedIdentity {
  readonly resolvedTenantId: string
  readonly callerTenantId: string
  readonly keyId: string
  readonly scopes: readonly string[]
  /** The same, signed (X-Service-Identity: docs/credentials.md); null or absent off such a route. */
  readonly assertion?: string | null
}

/** The identity an admitted request carries to its upstream; null before admission. */
export function trustedIdentity(request: FastifyRequest): TrustedIdentity | null {
  const principal = request.principal
  const acting = request.actingTenant
  if (principal === null || acting === null) return null
  return {
    resolvedTenantId: acting.id,
    callerTenantId: principal.tenant.id,
    keyId: principal.key.id,
    scopes: principal.key.scopes,
    assertion: request.serviceIdentity,
  }
}

export interface ForwardContext {
  readonly identity: TrustedIdentity | null
  readonly requestId: string
  readonly forwardAuthorization: boolean
  /**
   * The peer address: the hop that reached the gateway, appended to X-Forwarded-For. Not
   * request.ip, which behind TRUSTED_PROXIES is the client the chain already names.
   */
  readonly peerAddress: string | undefined
  readonly proto: 'http' | 'https'
  /** The Host the client asked for, as X-Forwarded-Host. */
  readonly host: string | undefined
  /** The client's own Connection header: every header it names is hop-by-hop (RFC 9110 §7.6.1). */
  readonly connection: string | string[] | undefined
  /** Headers of SPOOFING that the route lets through (`pass_headers`), as `headerReading` reads them. */
  readonly passHeaders: ReadonlySet<string>
  /** The request's cell (steps/cell.ts), sent as X-Service-Cell; null or absent: none. */
  readonly cell?: string | null
}

// Hop-by-hop headers (RFC 9110 §7.6.1) and those the gateway sets itself.
const DROPPED = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'te',
  'trailer',
  'upgrade',
  // The body's framing is undici's: it sends the body with its Content-Length, or chunked.
  'transfer-encoding',
  // Answered by the gateway itself (proxy/plugin.ts): the body is on its way when the upstream is asked.
  'expect',
  'x-request-id',
  'x-forwarded-proto',
  'x-forwarded-host',
])

/**
 * Headers a client could use to change what an upstream takes the method, the path or the
 * client's address to be, past the route's read/write scopes; and Forwarded, which the gateway
 * does not vouch for. Dropped unless the route names them in `pass_headers`.
 */
export const SPOOFING: ReadonlySet<string> = new Set([
  'x-http-method-override',
  'x-http-method',
  'x-method-override',
  'x-original-method',
  'x-original-url',
  'x-rewrite-url',
  'forwarded',
  'x-real-ip',
  // The client's address as CDNs, load balancers and frameworks name it (Akamai's True-Client-IP,
  // Cloudflare's, Fastly's…): an upstream that trusts one would take the address a client wrote.
  'true-client-ip',
  'x-client-ip',
  'client-ip',
  'cf-connecting-ip',
  'fastly-client-ip',
  'x-cluster-client-ip',
  'x-originating-ip',
  'x-remote-ip',
  'x-remote-addr',
])

const FORWARDED_FOR = 'x-forwarded-for'
const CONTENT_LENGTH = 'content-length'

export const NO_HEADERS: ReadonlySet<string> = new Set()

/** `-`, `_` or `.`: the separators a CGI, WSGI or Rack upstream reads alike (all become `_`). */
function isSeparator(code: number): boolean {
  return code === 45 || code === 95 || code === 46
}

/**
 * A (lower-case) header name as a CGI, WSGI or Rack upstream reads it: `_` and `.` taken for `-`,
 * so that `X_HTTP_Method_Override` and `x.real.ip` are the headers they spell. The one home of
 * that reading: the headers the gateway drops or sets, and the names of `pass_headers`, are all
 * compared through it. Most names have neither character and are returned as they are.
 */
export function headerReading(name: string): string {
  return name.indexOf('_') === -1 && name.indexOf('.') === -1 ? name : name.replace(/[_.]/g, '-')
}

/**
 * Whether a (lower-case) header name reads as X-Service-* once `_` and `.` are taken for `-`:
 * `x_service_resolved_tenant` reaches a CGI upstream as HTTP_X_SERVICE_RESOLVED_TENANT, beside
 * the gateway's own. Char codes rather than a normalised copy: it runs for every inbound header.
 */
export function isTrustedLookalike(name: string): boolean {
  return (
    name.length >= TRUSTED_PREFIX.length &&
    name.charCodeAt(0) === 120 &&
    isSeparator(name.charCodeAt(1)) &&
    name.startsWith('service', 2) &&
    isSeparator(name.charCodeAt(9))
  )
}

function connectionTokens(connection: string | string[] | undefined): ReadonlySet<string> {
  // The common values name no header to drop (keep-alive and close are dropped anyway).
  if (connection === undefined || connection === 'keep-alive' || connection === 'close') return NO_HEADERS
  const tokens = new Set<string>()
  for (const value of Array.isArray(connection) ? connection : [connection]) {
    for (const token of value.split(',')) {
      const name = token.trim().toLowerCase()
      if (name !== '') tokens.add(name)
    }
  }
  return tokens
}

/**
 * The headers to send upstream, built from the inbound ones: the gateway's own first, so that no
 * number of client headers can push them past an upstream's header limit, then the client's.
 * Node gives header names in lower case and folds repeats into one entry, so one check per name
 * removes every copy; `headerReading` removes every spelling. Headers named by Connection are
 * dropped here too, whatever the proxy library already did (GHSA-gwhp-pf74-vj37): a client must
 * not be able to remove a header the gateway sets.
 */
export function upstreamHeaders(inbound: IncomingHttpHeaders, context: ForwardContext): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {}
  const identity = context.identity
  if (identity !== null) {
    out['x-service-resolved-tenant'] = identity.resolvedTenantId
    out['x-service-caller-tenant'] = identity.callerTenantId
    out['x-service-key-id'] = identity.keyId
    out['x-service-scopes'] = identity.scopes.join(' ')
    if (identity.assertion != null) out['x-service-identity'] = identity.assertion
  }
  if (context.cell != null) out[CELL_HEADER] = context.cell
  out['x-request-id'] = context.requestId
  const named = connectionTokens(context.connection)
  const forwardedFor = named.has(FORWARDED_FOR) ? undefined : inbound[FORWARDED_FOR]
  const peer = context.peerAddress
  if (peer !== undefined) {
    out[FORWARDED_FOR] = typeof forwardedFor === 'string' && forwardedFor !== '' ? `${forwardedFor}, ${peer}` : peer
  } else if (forwardedFor !== undefined) out[FORWARDED_FOR] = forwardedFor
  out['x-forwarded-proto'] = context.proto
  if (context.host !== undefined) out['x-forwarded-host'] = context.host

  // for…in rather than Object.keys: no array per request. Both header objects are plain (a copy of
  // Node's, undici's parse), so nothing enumerable is inherited.
  for (const name in inbound) {
    if (isTrustedLookalike(name) || named.has(name)) continue
    const reading = headerReading(name)
    // The gateway's X-Forwarded-For was written above; another spelling of it is a forgery. So is
    // another spelling of Content-Length: a folding upstream would read the body's length twice.
    if (DROPPED.has(reading) || reading === FORWARDED_FOR || (reading === CONTENT_LENGTH && name !== reading)) continue
    if (SPOOFING.has(reading) && !context.passHeaders.has(reading)) continue
    if (name === 'authorization' && !context.forwardAuthorization) continue
    out[name] = inbound[name]
  }
  return out
}

/**
 * Response headers the client never gets from the upstream: the hop-by-hop ones (RFC 9110
 * §7.6.1), which describe the upstream's connection, not ours; X-Request-Id, which is the
 * gateway's (set on every reply before routing, http/guards.ts); and Service-Worker-Allowed, which
 * would let a worker of a route's path take a scope above it, up to the console and the portal on
 * the same origin (steps/service-worker.ts refuses the worker's script itself). One look-up a
 * header, as for the others: no cost beyond it.
 */
const DROPPED_RESPONSE = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'te',
  'trailer',
  'upgrade',
  'transfer-encoding',
  'x-request-id',
  'service-worker-allowed',
])

/**
 * The upstream's response headers as the client gets them: without those above, those its
 * Connection header names (so an upstream's `Connection: keep-alive` cannot override a client's
 * `Connection: close`), and the route's `hidden` ones (its meters' reports). A new object rather
 * than deletes on the upstream's: a deleted property turns an object into a slow dictionary for
 * every later use.
 */
export function downstreamHeaders(
  headers: IncomingHttpHeaders,
  hidden: ReadonlySet<string> = NO_HEADERS,
): IncomingHttpHeaders {
  const named = connectionTokens(headers.connection)
  const out: IncomingHttpHeaders = {}
  for (const name in headers) {
    if (DROPPED_RESPONSE.has(name) || named.has(name) || hidden.has(name)) continue
    out[name] = headers[name]
  }
  return out
}
