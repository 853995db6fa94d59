// What AUTHZ_PORT's endpoints are asked (docs/forward-auth.md): the original request a proxy in
// front describes, read from the fields each proxy sends. nginx's auth_request names it in
// X-Original-Method and X-Original-URI; Traefik's forwardAuth and Caddy's forward_auth in
// X-Forwarded-Method, -Uri and -Host; Envoy's ext_authz sends the original method as its own
// and the original path after `path_prefix` (/envoy). Everything else the proxy passes (the
// client's Authorization, acting header, X-Forwarded-For, X-Request-Id) is read as on PORT.
import type { IncomingMessage } from 'node:http'
import { ApiError, routeNotFound } from '../errors.js'
import type { DecisionKind } from '../http/decision-mark.js'

/** The request a proxy asks about: its method, its target (path and query), and its Host. */
export interface OriginalRequest {
  readonly kind: DecisionKind
  readonly method: string
  readonly url: string
  /** The Host the client asked for, when the proxy says (X-Forwarded-Host); else the asking request's. */
  readonly host: string | undefined
}

/** An HTTP method is a token (RFC 9110 §9.1). */
const METHOD = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,32}$/

export const ENVOY_PREFIX = '/envoy'

/** One field the proxy must send, or the 400 that says which and how to set it. */
function field(raw: IncomingMessage, name: string, how: string): string | ApiError {
  const value = raw.headers[name]
  if (typeof value === 'string' && value !== '') return value
  return new ApiError('bad_request', `${name} is required (one value): ${how}`)
}

function method(value: string, name: string): string | ApiError {
  return METHOD.test(value) ? value.toUpperCase() : new ApiError('bad_request', `${name} is not an HTTP method`)
}

/** The target as a path: a proxy that sends a full URL there has been set up wrong. */
function target(value: string, name: string): string | ApiError {
  return value.startsWith('/') ? value : new ApiError('bad_request', `${name} must be the request's path and query`)
}

/**
 * The original request behind an endpoint of AUTHZ_PORT other than /verify (verify.ts), or the
 * refusal: 404 for a path that is none of them, 400 for a field the proxy did not send.
 */
export function originalRequest(raw: IncomingMessage): OriginalRequest | ApiError {
  const url = raw.url ?? '/'
  const query = url.indexOf('?')
  const path = query === -1 ? url : url.slice(0, query)
  if (path === '/nginx') {
    const m = field(raw, 'x-original-method', 'proxy_set_header X-Original-Method $request_method;')
    if (m instanceof ApiError) return m
    const u = field(raw, 'x-original-uri', 'proxy_set_header X-Original-URI $request_uri;')
    if (u instanceof ApiError) return u
    const checkedMethod = method(m, 'X-Original-Method')
    if (checkedMethod instanceof ApiError) return checkedMethod
    const checkedUrl = target(u, 'X-Original-URI')
    if (checkedUrl instanceof ApiError) return checkedUrl
    return { kind: 'nginx', method: checkedMethod, url: checkedUrl, host: undefined }
  }
  if (path === '/forward-auth') {
    const how = 'Traefik forwardAuth and Caddy forward_auth send it'
    const m = field(raw, 'x-forwarded-method', how)
    if (m instanceof ApiError) return m
    const u = field(raw, 'x-forwarded-uri', how)
    if (u instanceof ApiError) return u
    const checkedMethod = method(m, 'X-Forwarded-Method')
    if (checkedMethod instanceof ApiError) return checkedMethod
    const checkedUrl = target(u, 'X-Forwarded-Uri')
    if (checkedUrl instanceof ApiError) return checkedUrl
    const host = raw.headers['x-forwarded-host']
    return {
      kind: 'forward-auth',
      method: checkedMethod,
      url: checkedUrl,
      host: typeof host === 'string' ? host : undefined,
    }
  }
  if (path === ENVOY_PREFIX || path.startsWith(`${ENVOY_PREFIX}/`)) {
    const rest = url.slice(ENVOY_PREFIX.length)
    return {
      kind: 'envoy',
      method: raw.method ?? 'GET',
      url: rest.startsWith('/') ? rest : `/${rest}`,
      host: undefined,
    }
  }
  return routeNotFound(raw.method ?? 'GET', path)
}
