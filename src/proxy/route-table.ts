// The route table (docs/configuration.md): config/gateway.yaml, validated once at boot, plus the catch-all
// that UPSTREAM_URL adds. A mistake stops the gateway with one line that names the route.
import { ConfigError } from '../config-readers.js'
import { SCOPE_PATTERN } from '../shared/scopes.js'
import { CONSOLE_PREFIX, PORTAL_PREFIX } from '../shared/paths.js'
import { defaultPerAccount, defaultPerTenant } from './concurrency.js'
import { headerReading, isTrustedLookalike, NO_HEADERS } from './headers.js'
import { isReservedPath } from './paths.js'
import type { ProxyRoute } from './route.js'
import { parseRouteIdentity } from '../identity/route-identity.js'
import { DEFAULT_LIMITS, INHERITED_KEYS, parseRouteLimits, parseShareLimits, SHARE_KEYS } from './route-limits.js'
import { parseRouteWebSocket, WEBSOCKET_KEYS } from './websocket/route-options.js'
import { METER_KEYS, parseCost, parseMeters } from './route-meters.js'
import { DEFAULT_RETRIES, parseRetries } from './upstreams/retry-options.js'
import { parseRouteTargets, TARGET_KEYS } from './upstreams/route-options.js'
import { parseRouteCors } from './cors/route-options.js'
import { CELL_KEYS, checkCellBase, parseRouteCells } from './upstreams/route-cells.js'

const TOP_LEVEL_KEYS = new Set(['routes', ...INHERITED_KEYS])
const ROUTE_KEYS = new Set([
  'prefix',
  'upstream',
  'scopes',
  'public',
  'same_origin_documents',
  'forward_authorization',
  'pass_headers',
  'identity',
  'cors',
  'retries',
])
for (const key of [...INHERITED_KEYS, ...SHARE_KEYS, ...WEBSOCKET_KEYS, ...METER_KEYS, ...TARGET_KEYS, ...CELL_KEYS])
  ROUTE_KEYS.add(key)
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
  if (isReservedPath(value, consoleServed))
    fail(
      where,
      isReservedPath(value)
        ? 'prefix is served by the gateway itself'
        : `prefix is served by the gateway itself: the web console's (${CONSOLE_PREFIX}) or the portal's (${PORTAL_PREFIX}); set CONSOLE=off to route it to an upstream`,
    )
  return value
}

/** What a URL written as a host and port alone lacks (`127.0.0.1:9000` is no URL, `localhost:9000` one of scheme `localhost:`). */
const SCHEME_FIRST = 'write the scheme first, as in http://127.0.0.1:9000'

/**
 * Checks an upstream URL; exported so that UPSTREAM_URL gets the same rules. `field` names it in
 * the message (`upstream`, or a target's `targets[2].url`).
 */
export function parseUpstream(where: string, value: unknown, field = 'upstream'): string {
  if (typeof value !== 'string') fail(where, `${field} must be an http or https URL`)
  let url: URL
  try {
    url = new URL(value)
  } catch {
    // Never echo the value: it may carry a password.
    fail(where, `${field} is not a valid URL: ${SCHEME_FIRST}`)
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    fail(where, `${field} must use http:// or https://: ${SCHEME_FIRST}`)
  if (url.username !== '' || url.password !== '') fail(where, `${field} may not carry credentials`)
  if (url.search !== '' || url.hash !== '') fail(where, `${field} may not have a query or a fragment`)
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
  const defaults = parseRouteLimits(doc, DEFAULT_LIMITS, (problem) => fail('top level', problem))
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
    const sameOriginDocuments = boolean(where, 'same_origin_documents', entry.same_origin_documents)
    if (sameOriginDocuments && !isPublic)
      fail(where, "same_origin_documents is a public route's option (a keyed route's answers are never sandboxed)")
    const scopes = parseScopes(where, entry.scopes)
    if (isPublic && (scopes.read.length > 0 || scopes.write.length > 0))
      fail(where, 'a public route cannot require scopes')
    const identity = parseRouteIdentity(entry.identity, (problem) => fail(where, problem))
    if (isPublic && identity !== null) fail(where, 'a public route cannot send a signed identity (it has none)')
    const limits = parseRouteLimits(entry, defaults, (problem) => fail(where, problem))
    const websocket = parseRouteWebSocket(entry, (problem) => fail(where, problem))
    const cost = parseCost(entry.cost, (problem) => fail(where, problem))
    const meters = parseMeters(entry.meters, (problem) => fail(where, problem))
    if (isPublic && (cost !== 1 || meters.length > 0))
      fail(where, 'a public route counts no usage: it cannot have a cost or meters')
    const targets = parseRouteTargets(
      entry,
      isPublic,
      (value, field) => parseUpstream(where, value, field),
      (problem) => fail(where, problem),
    )
    const cells = parseRouteCells(
      entry,
      isPublic,
      targets !== null || entry.upstream !== undefined,
      (value, field) => parseUpstream(where, value, field),
      (problem) => fail(where, problem),
    )
    // No upstream, targets nor cells: a route only decided for (docs/forward-auth.md).
    const decidedOnly = targets === null && cells === null && entry.upstream === undefined
    if (decidedOnly && websocket !== null)
      fail(where, 'websocket needs an upstream (a route without one is only decided for, on AUTHZ_PORT)')
    if (decidedOnly && meters.length > 0)
      fail(where, "meters need an upstream's answers (a route without an upstream is only decided for, on AUTHZ_PORT)")
    // With cells alone, the route's scheme and base path are its cells' (the default cell's first target).
    const upstream = decidedOnly
      ? null
      : targets !== null
        ? targets.targets[0]!.url
        : cells !== null && entry.upstream === undefined
          ? cells.cells.get(cells.defaultCell!)!.targets[0]!.url
          : parseUpstream(where, entry.upstream)
    if (cells !== null && upstream !== null) checkCellBase(cells, upstream, (problem) => fail(where, problem))
    routes.push(
      Object.freeze({
        prefix,
        upstream,
        targets,
        cells,
        retries: parseRetries(entry.retries, limits.timeoutMs, (problem) => fail(where, problem)),
        scopes,
        public: isPublic,
        sameOriginDocuments,
        forwardAuthorization: boolean(where, 'forward_authorization', entry.forward_authorization),
        passHeaders: parsePassHeaders(where, entry.pass_headers),
        ...limits,
        ...parseShareLimits(entry, limits.maxConnections, (problem) => fail(where, problem)),
        identity,
        websocket,
        cost,
        meters,
        cors: parseRouteCors(entry.cors, (problem) => fail(where, problem)),
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
        targets: null,
        cells: null,
        retries: DEFAULT_RETRIES,
        scopes: { read: [], write: [] },
        public: false,
        sameOriginDocuments: false,
        forwardAuthorization: false,
        passHeaders: NO_HEADERS,
        ...defaults,
        maxConnectionsPerTenant: defaultPerTenant(defaults.maxConnections),
        maxConnectionsPerAccount: defaultPerAccount(defaults.maxConnections),
        identity: null,
        websocket: null,
        cost: 1,
        meters: [],
        cors: null,
      }),
    )
  }
  return routes
}
