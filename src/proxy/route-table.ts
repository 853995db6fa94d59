// The route table (docs/configuration.md): config/gateway.yaml, validated once at boot, plus the catch-all
// that UPSTREAM_URL adds. A mistake stops the gateway with one line that names the route.
import { ConfigError } from '../config.js'
import { SCOPE_PATTERN } from '../auth/scopes.js'
import { defaultPerAccount, defaultPerTenant } from './concurrency.js'
import { headerReading, isTrustedLookalike, NO_HEADERS } from './headers.js'
import { isReservedPath } from './paths.js'
import { parseRouteIdentity, type RouteIdentity } from './route-identity.js'
import { parseRouteWebSocket, type RouteWebSocket, WEBSOCKET_KEYS } from './websocket/route-options.js'

export interface ProxyRoute {
  /** `/` for the catch-all; otherwise whole segments, no trailing slash. */
  readonly prefix: string
  /** http or https origin, optionally with a base path that the forwarded path is appended to. */
  readonly upstream: string
  /** Scopes a key needs here: `read` for GET, HEAD and OPTIONS, `write` for every other method. */
  readonly scopes: { readonly read: readonly string[]; readonly write: readonly string[] }
  /** No key needed: X-Service-* are still stripped, nothing is injected, nothing is counted. */
  readonly public: boolean
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
}

export const DEFAULT_TIMEOUT_MS = 30_000
export const DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024
export const DEFAULT_MAX_CONNECTIONS = 256
export const DEFAULT_BODY_IDLE_TIMEOUT_MS = 10_000
export const DEFAULT_RESPONSE_IDLE_TIMEOUT_MS = 30_000

/** Options a route inherits from the top level when it does not set them. */
const INHERITED_KEYS = [
  'timeout_ms',
  'max_body_bytes',
  'max_connections',
  'body_idle_timeout_ms',
  'response_idle_timeout_ms',
] as const
const TOP_LEVEL_KEYS = new Set(['routes', ...INHERITED_KEYS])
const SHARE_KEYS = ['max_connections_per_tenant', 'max_connections_per_account'] as const
const ROUTE_KEYS = new Set([
  'prefix',
  'upstream',
  'scopes',
  'public',
  'forward_authorization',
  'pass_headers',
  'identity',
])
for (const key of [...INHERITED_KEYS, ...SHARE_KEYS, ...WEBSOCKET_KEYS]) ROUTE_KEYS.add(key)
const SCOPE_KEYS = new Set(['read', 'write'])
// Characters a prefix segment may hold: unreserved and most sub-delims of RFC 3986, but not
// `:` and `*` (route patterns to the router), `;` and `%` (refused paths, docs/api.md).
const PREFIX_PATTERN = /^(\/[A-Za-z0-9._~!$&'()+,=@-]+)+$/
const scopeRegex = new RegExp(SCOPE_PATTERN)

type Doc = Readonly<Record<string, unknown>>

function isMapping(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

function fail(where: string, problem: string): never {
  throw new ConfigError('GATEWAY_CONFIG', `${where}: ${problem}`)
}

/** Control characters escaped, so that a newline in a prefix cannot break the one-line message. */
function printable(text: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: it finds control characters to escape them
  return text.replace(/[\u0000-\u001f\u007f]/g, (c) => JSON.stringify(c).slice(1, -1))
}

function unknownKeys(where: string, value: Record<string, unknown>, allowed: Set<string>): void {
  for (const key of Object.keys(value)) {
    if (!allowed.has(key)) fail(where, `unknown key "${key}" (allowed: ${[...allowed].join(', ')})`)
  }
}

function positiveInteger(where: string, key: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value <= 0) {
    fail(where, `${key} must be a positive whole number`)
  }
  return value
}

function boolean(where: string, key: string, value: unknown): boolean {
  if (value === undefined) return false
  if (typeof value !== 'boolean') fail(where, `${key} must be true or false`)
  return value
}

function parsePrefix(where: string, value: unknown, consoleServed: boolean): string {
  if (typeof value !== 'string') fail(where, 'prefix must be a path such as /v1/shipments')
  if (value === '/') return value
  if (!PREFIX_PATTERN.test(value)) {
    fail(
      where,
      "prefix must start with /, hold whole segments of letters, digits and . _ ~ ! $ & ' ( ) + , = @ - (no trailing slash)",
    )
  }
  if (value.split('/').some((segment) => segment === '.' || segment === '..'))
    fail(where, 'prefix may not hold . or .. segments')
  // Folded as the gateway compares them: it refuses every spelling of a reserved path (paths.ts).
  if (isReservedPath(value, consoleServed)) fail(where, 'prefix is served by the gateway itself')
  return value
}

/** Checks an upstream URL; exported so that UPSTREAM_URL gets the same rules. */
export function parseUpstream(where: string, value: unknown): string {
  if (typeof value !== 'string') fail(where, 'upstream must be an http or https URL')
  let url: URL
  try {
    url = new URL(value)
  } catch {
    // Never echo the value: it may carry a password.
    fail(where, 'upstream is not a valid URL')
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') fail(where, 'upstream must use http:// or https://')
  if (url.username !== '' || url.password !== '') fail(where, 'upstream may not carry credentials')
  if (url.search !== '' || url.hash !== '') fail(where, 'upstream may not have a query or a fragment')
  // Keep the base path without its trailing slash: the forwarded path is appended to it.
  const base = url.pathname.replace(/\/+$/, '')
  return `${url.origin}${base}`
}

function scopeList(where: string, key: string, value: unknown): string[] {
  if (value === undefined) return []
  if (!Array.isArray(value) || value.some((scope) => typeof scope !== 'string' || !scopeRegex.test(scope))) {
    fail(where, `scopes.${key} must be a list of scope names such as tracking:read`)
  }
  return value as string[]
}

// A header field name (RFC 9110 §5.1: a token).
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9a-z-]+$/

function parsePassHeaders(where: string, value: unknown): ReadonlySet<string> {
  if (value === undefined) return NO_HEADERS
  if (!Array.isArray(value)) fail(where, 'pass_headers must be a list of header names')
  const names = new Set<string>()
  for (const item of value) {
    const name = typeof item === 'string' ? item.toLowerCase() : ''
    if (!HEADER_NAME.test(name)) fail(where, 'pass_headers must be a list of header names')
    if (isTrustedLookalike(name)) fail(where, `pass_headers may not name an X-Service-* header (${name})`)
    // Named once, it passes in every spelling (`X_Real_IP` too), as the dropping reads them.
    names.add(headerReading(name))
  }
  return names
}

function parseScopes(where: string, value: unknown): ProxyRoute['scopes'] {
  if (value === undefined) return { read: [], write: [] }
  if (!isMapping(value)) fail(where, 'scopes must be a mapping with read and write lists')
  unknownKeys(`${where} scopes`, value, SCOPE_KEYS)
  return { read: scopeList(where, 'read', value.read), write: scopeList(where, 'write', value.write) }
}

/**
 * The routes of `doc` (the parsed GATEWAY_CONFIG), then a catch-all `/` to `upstreamUrl` when it
 * is set. Prefixes must be unique, the catch-all included. With `consoleServed`, no route may take
 * the console's path either.
 */
export function loadRouteTable(doc: Doc, upstreamUrl: string | undefined, consoleServed = false): ProxyRoute[] {
  unknownKeys('top level', doc, TOP_LEVEL_KEYS)
  const defaults = limitsOf('top level', doc, {
    timeoutMs: DEFAULT_TIMEOUT_MS,
    maxBodyBytes: DEFAULT_MAX_BODY_BYTES,
    maxConnections: DEFAULT_MAX_CONNECTIONS,
    bodyIdleTimeoutMs: DEFAULT_BODY_IDLE_TIMEOUT_MS,
    responseIdleTimeoutMs: DEFAULT_RESPONSE_IDLE_TIMEOUT_MS,
  })
  const entries = doc.routes ?? []
  if (!Array.isArray(entries)) fail('top level', 'routes must be a list')

  const routes: ProxyRoute[] = []
  const seen = new Map<string, string>()
  entries.forEach((entry: unknown, index) => {
    let where = `routes[${index}]`
    if (!isMapping(entry)) fail(where, 'must be a mapping with prefix and upstream')
    if (typeof entry.prefix === 'string') where += ` (${printable(entry.prefix)})`
    unknownKeys(where, entry, ROUTE_KEYS)
    const prefix = parsePrefix(where, entry.prefix, consoleServed)
    const earlier = seen.get(prefix)
    if (earlier !== undefined) fail(where, `prefix duplicates ${earlier}`)
    seen.set(prefix, `routes[${index}]`)
    const isPublic = boolean(where, 'public', entry.public)
    const scopes = parseScopes(where, entry.scopes)
    if (isPublic && (scopes.read.length > 0 || scopes.write.length > 0))
      fail(where, 'a public route cannot require scopes')
    const identity = parseRouteIdentity(entry.identity, (problem) => fail(where, problem))
    if (isPublic && identity !== null) fail(where, 'a public route cannot send a signed identity (it has none)')
    const limits = limitsOf(where, entry, defaults)
    const websocket = parseRouteWebSocket(entry, (problem) => fail(where, problem))
    routes.push(
      Object.freeze({
        prefix,
        upstream: parseUpstream(where, entry.upstream),
        scopes,
        public: isPublic,
        forwardAuthorization: boolean(where, 'forward_authorization', entry.forward_authorization),
        passHeaders: parsePassHeaders(where, entry.pass_headers),
        ...limits,
        ...shareLimits(where, entry, limits.maxConnections),
        identity,
        websocket,
      }),
    )
  })

  if (upstreamUrl !== undefined) {
    const earlier = seen.get('/')
    if (earlier !== undefined) fail(earlier, 'prefix / duplicates the catch-all that UPSTREAM_URL adds')
    routes.push(
      Object.freeze({
        prefix: '/',
        upstream: parseUpstream('UPSTREAM_URL', upstreamUrl),
        scopes: { read: [], write: [] },
        public: false,
        forwardAuthorization: false,
        passHeaders: NO_HEADERS,
        ...defaults,
        maxConnectionsPerTenant: defaultPerTenant(defaults.maxConnections),
        maxConnectionsPerAccount: defaultPerAccount(defaults.maxConnections),
        identity: null,
        websocket: null,
      }),
    )
  }
  return routes
}

type RouteLimits = Pick<
  ProxyRoute,
  'timeoutMs' | 'maxBodyBytes' | 'maxConnections' | 'bodyIdleTimeoutMs' | 'responseIdleTimeoutMs'
>

/** The time, size and connection limits of a route (or of the top level), each defaulting to `fallback`'s. */
function limitsOf(where: string, value: Doc, fallback: RouteLimits): RouteLimits {
  return {
    timeoutMs: positiveInteger(where, 'timeout_ms', value.timeout_ms, fallback.timeoutMs),
    maxBodyBytes: positiveInteger(where, 'max_body_bytes', value.max_body_bytes, fallback.maxBodyBytes),
    maxConnections: positiveInteger(where, 'max_connections', value.max_connections, fallback.maxConnections),
    bodyIdleTimeoutMs: positiveInteger(
      where,
      'body_idle_timeout_ms',
      value.body_idle_timeout_ms,
      fallback.bodyIdleTimeoutMs,
    ),
    responseIdleTimeoutMs: positiveInteger(
      where,
      'response_idle_timeout_ms',
      value.response_idle_timeout_ms,
      fallback.responseIdleTimeoutMs,
    ),
  }
}

/**
 * A route's shares of its connections: per resolved tenant and per parent account. The account's
 * holds the tenant's: set both, and a tenant share above the account's is a mistake to fix; set
 * the tenant's alone, and the account's default (half) still bounds a parent's sub-accounts.
 */
function shareLimits(
  where: string,
  entry: Doc,
  maxConnections: number,
): Pick<ProxyRoute, 'maxConnectionsPerTenant' | 'maxConnectionsPerAccount'> {
  const share = (key: string, fallback: number) => {
    const limit = positiveInteger(where, key, entry[key], fallback)
    if (limit > maxConnections) fail(where, `${key} may not exceed max_connections`)
    return limit
  }
  const perTenant = share('max_connections_per_tenant', defaultPerTenant(maxConnections))
  const perAccount = share('max_connections_per_account', defaultPerAccount(maxConnections))
  if (entry.max_connections_per_account !== undefined && perTenant > perAccount)
    fail(
      where,
      'max_connections_per_tenant may not exceed max_connections_per_account (a tenant is part of its account)',
    )
  return { maxConnectionsPerTenant: perTenant, maxConnectionsPerAccount: perAccount }
}

/** Scopes a request with this method needs on this route. */
export function scopesFor(route: ProxyRoute, method: string): readonly string[] {
  return method === 'GET' || method === 'HEAD' || method === 'OPTIONS' ? route.scopes.read : route.scopes.write
}
