// A route's `cors` option (docs/configuration.md, routes): which other origins' pages may call it
// from a browser, with which methods and request headers, and which answer headers they may read.
// Checked once at boot; a mistake is the route table's one-line error.
import { isIP } from 'node:net'

/** A route's CORS policy, as proxy/cors/policy.ts applies it. */
export interface RouteCors {
  /** Exact origins as a browser serialises them (`https://app.example`); null: any origin (`*`). */
  readonly origins: ReadonlySet<string> | null
  /** The origins as written, for the console and the docs' examples (`['*']` for any). */
  readonly originList: readonly string[]
  /** Methods a preflight may ask for, upper case (Fetch compares them byte for byte). */
  readonly methods: readonly string[]
  /** Request header names a preflight may ask for, lower case: the four always allowed, then `headers`. */
  readonly headers: ReadonlySet<string>
  /** Answer header names a page may read, lower case: RateLimit, Retry-After, X-Request-Id, then `expose_headers`. */
  readonly exposeHeaders: readonly string[]
  /** `Access-Control-Allow-Credentials: true`: the page may send cookies (never with any origin). */
  readonly credentials: boolean
  /** `Access-Control-Max-Age`, in seconds; null: not sent (the browser's own default, 5 s). */
  readonly maxAgeSeconds: number | null
}

/** The methods a route proxies (proxy/plugin.ts), and so the default of `methods`. */
export const CORS_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const

/** Request headers every CORS route allows: the key, the body's type, the acting header, the idempotency key. */
export const ALWAYS_ALLOWED_HEADERS = [
  'authorization',
  'content-type',
  'x-service-acting-tenant',
  'idempotency-key',
] as const

/** Answer headers a page may always read: the limits' fields, the wait after a 429 or 503, the request's id. */
export const ALWAYS_EXPOSED_HEADERS = ['ratelimit', 'ratelimit-policy', 'retry-after', 'x-request-id'] as const

/** The longest preflight cache a browser keeps (Firefox: 24 h; Chromium cuts it to 2 h). */
export const MAX_AGE_CEILING_SECONDS = 86_400

const CORS_KEYS = new Set(['origins', 'methods', 'headers', 'expose_headers', 'credentials', 'max_age_seconds'])

// A header field name (RFC 9110 §5.6.2: a token).
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9a-z-]+$/

/** A loopback host: the one place a page's origin may be plain http (a developer's own machine). */
function isLoopback(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, '')
  if (host === 'localhost') return true
  if (isIP(host) === 4) return host.startsWith('127.')
  return host === '::1'
}

function isMapping(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

/** One entry of `origins`: the origin as a browser sends it, or the route table's error. */
function parseOrigin(text: unknown, field: string, fail: (problem: string) => never): string {
  const example = 'write it as a browser sends it, scheme://host[:port] with no path, as in https://app.example.com'
  if (typeof text !== 'string') fail(`${field} must be an origin: ${example}`)
  let url: URL
  try {
    url = new URL(text)
  } catch {
    fail(`${field} (${JSON.stringify(text)}) is not an origin: ${example}`)
  }
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && isLoopback(url.hostname)))
    fail(
      `${field} (${JSON.stringify(text)}) must be https:// (http:// only for a loopback host such as http://127.0.0.1:3000)`,
    )
  // Exact: a browser's Origin is compared byte for byte, so a path, a trailing slash, upper case
  // or a default port written out would never match.
  if (url.origin !== text)
    fail(`${field} (${JSON.stringify(text)}) is not an origin as a browser sends it: write ${url.origin}`)
  return text
}

function headerNames(value: unknown, key: string, fail: (problem: string) => never): string[] {
  if (value === undefined) return []
  const problem = `cors.${key} must be a list of header names such as X-Trace-Id`
  if (!Array.isArray(value)) fail(problem)
  return value.map((item) => {
    const name = typeof item === 'string' ? item.toLowerCase() : ''
    if (!HEADER_NAME.test(name)) fail(`${problem} (${JSON.stringify(item)} is not one)`)
    return name
  })
}

/** Checks a route's `cors`; `fail` throws the route table's one-line error (it names the route). */
export function parseRouteCors(value: unknown, fail: (problem: string) => never): RouteCors | null {
  if (value === undefined) return null
  if (!isMapping(value))
    fail(
      'cors must be a mapping with origins (and optionally methods, headers, expose_headers, credentials, max_age_seconds)',
    )
  for (const key of Object.keys(value))
    if (!CORS_KEYS.has(key)) fail(`cors: unknown key "${key}" (allowed: ${[...CORS_KEYS].join(', ')})`)

  const credentials = value.credentials ?? false
  if (typeof credentials !== 'boolean') fail('cors.credentials must be true or false')

  const { origins } = value
  if (!Array.isArray(origins) || origins.length === 0)
    fail('cors.origins must be a list of origins such as https://app.example.com, or ["*"] for any origin')
  let allowed: Set<string> | null = null
  if (origins.includes('*')) {
    if (origins.length > 1) fail('cors.origins: "*" stands alone (it already allows every origin)')
    // Fetch refuses `*` with credentials; any page could then read a signed-in user's answers.
    if (credentials) fail('cors.origins may not be "*" with credentials: true; name the origins')
  } else {
    allowed = new Set(origins.map((origin, i) => parseOrigin(origin, `cors.origins[${i}]`, fail)))
  }

  let methods: string[] = [...CORS_METHODS]
  if (value.methods !== undefined) {
    const problem = `cors.methods must be a list of ${CORS_METHODS.join(', ')} (upper case)`
    if (!Array.isArray(value.methods) || value.methods.length === 0) fail(problem)
    for (const method of value.methods)
      if (!(CORS_METHODS as readonly unknown[]).includes(method))
        fail(`${problem}; ${JSON.stringify(method)} is not one`)
    methods = [...new Set(value.methods as string[])]
  }

  const maxAge = value.max_age_seconds
  if (
    maxAge !== undefined &&
    (typeof maxAge !== 'number' || !Number.isSafeInteger(maxAge) || maxAge < 0 || maxAge > MAX_AGE_CEILING_SECONDS)
  )
    fail(`cors.max_age_seconds must be a whole number from 0 to ${MAX_AGE_CEILING_SECONDS}`)

  return Object.freeze({
    origins: allowed,
    originList: allowed === null ? ['*'] : [...allowed],
    methods,
    headers: new Set([...ALWAYS_ALLOWED_HEADERS, ...headerNames(value.headers, 'headers', fail)]),
    exposeHeaders: [
      ...new Set([...ALWAYS_EXPOSED_HEADERS, ...headerNames(value.expose_headers, 'expose_headers', fail)]),
    ],
    credentials,
    maxAgeSeconds: (maxAge as number | undefined) ?? null,
  })
}
