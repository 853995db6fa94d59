// What a route's `cors` answers (docs/api.md, Browsers on other origins): a preflight decided by
// the gateway itself, and the fields an actual request's answer carries for an allowed origin.
// Plain functions over the request's fields, so that the rules are tested without a server. The
// names and the algorithm are the Fetch standard's (§3.2, the CORS protocol; §4.8, CORS-preflight fetch).
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http'
import type { RouteCors } from './route-options.js'

/** An origin a browser sends (scheme://host[:port]) or `null` (an opaque origin): echoed only if one of these. */
const ORIGIN_SHAPE = /^(null|[a-z][a-z0-9+.-]*:\/\/[^\s,/]+)$/

// A header field name (RFC 9110 §5.6.2: a token).
const TOKEN = /^[!#$%&'*+.^_`|~0-9a-z-]+$/

/** Whether a request is a CORS preflight: `OPTIONS` with `Origin` and `Access-Control-Request-Method`. */
export function isPreflight(method: string, headers: IncomingHttpHeaders): boolean {
  return method === 'OPTIONS' && headers.origin !== undefined && headers['access-control-request-method'] !== undefined
}

/** Whether pages of `origin` may call the route: one of its origins, or any well-formed one under `*`. */
export function originAllowed(cors: RouteCors, origin: string | undefined): origin is string {
  if (origin === undefined) return false
  return cors.origins === null ? ORIGIN_SHAPE.test(origin) : cors.origins.has(origin)
}

/**
 * The names of `Access-Control-Request-Headers` (a comma-separated list, Fetch §4.8: lower case
 * and sorted by the browser, but a client may send any case or blanks), or null when one is no
 * header name.
 */
export function requestedHeaderNames(value: string | undefined): string[] | null {
  if (value === undefined) return []
  const names: string[] = []
  for (const item of value.split(',')) {
    const name = item.trim().toLowerCase()
    if (name === '') continue // an empty list element, allowed by RFC 9110 §5.6.1
    if (!TOKEN.test(name)) return null
    names.push(name)
  }
  return names
}

/** A preflight's outcome: the 204's fields, or why it is refused (the 403's detail). */
export type PreflightDecision =
  | { readonly allowed: true; readonly headers: OutgoingHttpHeaders }
  | { readonly allowed: false; readonly reason: string }

/** Decides a preflight (`isPreflight` held) on a route with `cors`. */
export function decidePreflight(cors: RouteCors, headers: IncomingHttpHeaders, prefix: string): PreflightDecision {
  const origin = headers.origin
  if (!originAllowed(cors, origin))
    return {
      allowed: false,
      reason: `pages of the origin ${JSON.stringify(origin)} may not call ${prefix} from a browser`,
    }
  const method = headers['access-control-request-method'] as string
  if (!cors.methods.includes(method))
    return {
      allowed: false,
      reason: `the method ${JSON.stringify(method)} is not allowed on ${prefix} from a browser (allowed: ${cors.methods.join(', ')})`,
    }
  const names = requestedHeaderNames(headers['access-control-request-headers'])
  if (names === null)
    return { allowed: false, reason: 'Access-Control-Request-Headers must be a comma-separated list of header names' }
  const refused = names.filter((name) => !cors.headers.has(name))
  if (refused.length > 0)
    return {
      allowed: false,
      reason: `the request header${refused.length > 1 ? 's' : ''} ${refused.join(', ')} ${refused.length > 1 ? 'are' : 'is'} not allowed on ${prefix} from a browser (allowed: ${[...cors.headers].join(', ')})`,
    }
  const answer: OutgoingHttpHeaders = {
    'access-control-allow-origin': origin,
    'access-control-allow-methods': cors.methods.join(', '),
    'access-control-allow-headers': [...cors.headers].join(', '),
    vary: 'Origin',
  }
  if (cors.credentials) answer['access-control-allow-credentials'] = 'true'
  if (cors.maxAgeSeconds !== null) answer['access-control-max-age'] = String(cors.maxAgeSeconds)
  return { allowed: true, headers: answer }
}

/**
 * The fields an actual request's answer carries, refusals included: for an allowed origin the
 * origin itself (never `*`, so that one rule serves credentials too), what the page may read of
 * the answer, and whether it may send cookies; for any other origin nothing of CORS. `Vary:
 * Origin` in both cases, since the answer depends on it (a shared cache must not hand one
 * origin's answer to another).
 */
export function actualAnswerHeaders(cors: RouteCors, origin: string | undefined): OutgoingHttpHeaders {
  if (!originAllowed(cors, origin)) return { vary: 'Origin' }
  const answer: OutgoingHttpHeaders = {
    'access-control-allow-origin': origin,
    'access-control-expose-headers': cors.exposeHeaders.join(', '),
    vary: 'Origin',
  }
  if (cors.credentials) answer['access-control-allow-credentials'] = 'true'
  return answer
}

/** Whether an answer header is one of CORS's (`Access-Control-*`), which an upstream may not set on a CORS route. */
export function isCorsField(name: string): boolean {
  return name.length > 15 && name.startsWith('access-control-')
}
