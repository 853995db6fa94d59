// One catalogue of error codes (docs/api.md). Every failure leaves the gateway as the same
// application/problem+json envelope (RFC 9457) with a stable snake_case `code`.

export const ERRORS = {
  unauthenticated: { status: 401, title: 'Authentication required' },
  key_expired: { status: 401, title: 'Key expired' },
  tenant_deactivated: { status: 403, title: 'Tenant deactivated' },
  insufficient_scope: { status: 403, title: 'Insufficient scope' },
  ip_not_allowed: { status: 403, title: 'IP address not allowed' },
  parent_key_required: { status: 403, title: 'Parent key required' },
  service_worker_refused: { status: 403, title: 'Service worker refused' },
  cors_refused: { status: 403, title: 'CORS request refused' },
  acting_tenant_malformed: { status: 400, title: 'Malformed acting tenant' },
  acting_tenant_required: { status: 400, title: 'Acting tenant required' },
  acting_tenant_forbidden: { status: 403, title: 'Acting tenant forbidden' },
  acting_tenant_deactivated: { status: 403, title: 'Acting tenant deactivated' },
  validation_failed: { status: 400, title: 'Validation failed' },
  invalid_json: { status: 400, title: 'Invalid JSON body' },
  bad_request: { status: 400, title: 'Bad request' },
  bad_path: { status: 400, title: 'Bad path' },
  websocket_not_enabled: { status: 400, title: 'WebSocket not enabled' },
  not_found: { status: 404, title: 'Not found' },
  route_not_found: { status: 404, title: 'Route not found' },
  external_id_conflict: { status: 409, title: 'External id already in use' },
  key_not_active: { status: 409, title: 'Key not active' },
  limit_reached: { status: 409, title: 'Limit reached' },
  url_conflict: { status: 409, title: 'URL already registered' },
  endpoint_disabled: { status: 409, title: 'Webhook endpoint disabled' },
  plan_in_use: { status: 409, title: 'Plan in use' },
  idempotency_key_in_flight: { status: 409, title: 'Idempotency key in flight' },
  idempotency_answer_lost: { status: 409, title: 'Idempotent answer lost' },
  idempotency_key_reused: { status: 422, title: 'Idempotency key reused' },
  request_timeout: { status: 408, title: 'Request timeout' },
  payload_too_large: { status: 413, title: 'Payload too large' },
  unsupported_media_type: { status: 415, title: 'Unsupported media type' },
  cell_not_served: { status: 421, title: 'Cell not served' },
  credits_exhausted: { status: 402, title: 'Credits exhausted' },
  too_many_concurrent_requests: { status: 429, title: 'Too many concurrent requests' },
  rate_limited: { status: 429, title: 'Rate limited' },
  quota_exceeded: { status: 429, title: 'Quota exceeded' },
  headers_too_large: { status: 431, title: 'Request header fields too large' },
  internal_error: { status: 500, title: 'Internal error' },
  not_implemented: { status: 501, title: 'Not implemented' },
  upstream_unavailable: { status: 502, title: 'Upstream unavailable' },
  signature_invalid: { status: 401, title: 'Signature invalid' },
  store_unavailable: { status: 503, title: 'Store unavailable' },
  upstream_busy: { status: 503, title: 'Upstream busy' },
  scanner_keys_unavailable: { status: 503, title: 'Secret scanning keys unavailable' },
  spool_unavailable: { status: 503, title: 'Import spool unavailable' },
  not_ready: { status: 503, title: 'Not ready' },
  upstream_timeout: { status: 504, title: 'Upstream timeout' },
} as const satisfies Record<string, { status: number; title: string }>

export type ErrorCode = keyof typeof ERRORS

export interface FieldError {
  path: string
  message: string
}

export interface Problem {
  type: string
  title: string
  status: number
  detail: string
  code: ErrorCode
  request_id: string
  errors?: FieldError[]
  /** A limit's refusal: the policies that refused it (docs/api.md). */
  violated_policies?: readonly string[]
  /** A 421 cell_not_served: the tenant's cell, and the prefix of the route that has no targets for it. */
  cell?: string
  route?: string
  /** A refusal of credits: the meters whose balance is spent (docs/api.md, Credits). */
  meters?: readonly string[]
}

/** An error the gateway answers on purpose. Anything else thrown becomes a 500 without details. */
export interface ApiErrorOptions {
  errors?: FieldError[]
  headers?: Record<string, string>
  /** Extension members of the problem (RFC 9457 §3.2). */
  extensions?: Pick<Problem, 'violated_policies' | 'cell' | 'route' | 'meters'>
  /**
   * What the operator's log line of a 5xx says, beyond the answer: its message and fields (an
   * upstream's URL, its route, the cause). Never sent to the client.
   */
  log?: { message: string; fields: Record<string, unknown> }
}

export class ApiError extends Error {
  readonly status: number
  readonly code: ErrorCode
  readonly detail: string
  readonly options: ApiErrorOptions
  constructor(code: ErrorCode, detail: string, options: ApiErrorOptions = {}) {
    super(detail)
    this.code = code
    this.detail = detail
    this.options = options
    this.name = 'ApiError'
    this.status = ERRORS[code].status
  }
}

export function validationFailed(errors: FieldError[]): ApiError {
  const detail = errors.map((e) => `${e.path || '/'} ${e.message}`).join('; ')
  return new ApiError('validation_failed', detail, { errors })
}

export function problem(code: ErrorCode, detail: string, requestId: string, errors?: FieldError[]): Problem {
  const { status, title } = ERRORS[code]
  const body: Problem = {
    type: `urn:tenancy-gateway:error:${code}`,
    title,
    status,
    detail,
    code,
    request_id: requestId,
  }
  if (errors) body.errors = errors
  return body
}

export const PROBLEM_CONTENT_TYPE = 'application/problem+json; charset=utf-8'

/** The 404 of a path no route serves (the path without its query, cut short). */
export function routeNotFound(method: string, path: string): ApiError {
  return new ApiError('route_not_found', `no route for ${method} ${path.slice(0, 200)}`)
}

/** The 413 of a body over a limit, declared or counted. */
export function payloadTooLarge(limit: number): ApiError {
  return new ApiError('payload_too_large', `the request body is larger than ${limit} bytes`)
}

/**
 * A request's Content-Type as a refusal names it: its media type (before any parameter), cut to 60
 * characters, anything but visible ASCII as `?`; `no Content-Type` when it has none.
 */
export function contentTypeSent(header: string | undefined): string {
  const type = (header ?? '')
    .split(';', 1)[0]!
    .trim()
    .slice(0, 60)
    .replace(/[^\x21-\x7e]/g, '?')
  return type === '' ? 'no Content-Type' : `Content-Type ${type}`
}

/** The 415 of a body whose type the endpoint does not take, naming the type that came. */
export function unsupportedMediaType(accepted: string, header: string | undefined): ApiError {
  return new ApiError(
    'unsupported_media_type',
    `this endpoint accepts ${accepted} only; the body came with ${contentTypeSent(header)}`,
  )
}
