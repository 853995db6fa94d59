// The reusable parts of the OpenAPI document (ops/openapi.ts): the problem+json envelope, the error
// responses by the catalogue codes each carries, and the headers every management operation shares.
import { STATUS_CODES } from 'node:http'
import type { OpenAPIV3_1 } from 'openapi-types'
import { ERRORS, type ErrorCode } from '../errors.js'
import { EXTERNAL_ID_PATTERN, UUID_PATTERN } from '../shared/identifiers.js'

export const PROBLEM_JSON = 'application/problem+json'
export const ref = (kind: 'schemas' | 'parameters' | 'responses', name: string): OpenAPIV3_1.ReferenceObject => ({
  $ref: `#/components/${kind}/${name}`,
})

/** The error responses of the management API, by the catalogue codes each one carries. */
export const ERROR_RESPONSES = {
  BadRequest: [
    'acting_tenant_malformed',
    'acting_tenant_required',
    'validation_failed',
    'invalid_json',
    'bad_request',
    'bad_path',
  ],
  Unauthenticated: ['unauthenticated', 'key_expired'],
  Forbidden: [
    'tenant_deactivated',
    'acting_tenant_forbidden',
    'acting_tenant_deactivated',
    'parent_key_required',
    'insufficient_scope',
  ],
  NotFound: ['not_found'],
  Conflict: ['external_id_conflict', 'idempotency_key_in_flight', 'idempotency_answer_lost'],
  EndpointConflict: ['limit_reached', 'url_conflict', 'idempotency_key_in_flight', 'idempotency_answer_lost'],
  SessionLimit: ['limit_reached', 'idempotency_key_in_flight', 'idempotency_answer_lost'],
  EndpointDisabled: ['endpoint_disabled', 'idempotency_key_in_flight', 'idempotency_answer_lost'],
  PlanInUse: ['plan_in_use'],
  KeyNotActive: ['key_not_active', 'idempotency_key_in_flight', 'idempotency_answer_lost'],
  InFlight: ['idempotency_key_in_flight', 'idempotency_answer_lost'],
  KeyReused: ['idempotency_key_reused'],
  RequestTimeout: ['request_timeout'],
  PayloadTooLarge: ['payload_too_large'],
  UnsupportedMediaType: ['unsupported_media_type'],
  StoreUnavailable: ['store_unavailable'],
  // MANAGEMENT_RATE, every management call's (docs/api.md, Limits).
  RateLimited: ['rate_limited'],
  Error: ['internal_error'],
  // The request guards' refusals (http/guards.ts), which every path can answer before its route runs.
  HostRefused: ['bad_request'],
  HeadersTooLarge: ['headers_too_large'],
} as const satisfies Record<string, readonly ErrorCode[]>

export type ErrorResponse = keyof typeof ERROR_RESPONSES

/** What a response's codes alone do not say. */
const WHEN: Partial<Record<ErrorResponse, string>> = {
  HostRefused:
    'No Host header on HTTP/1.1, a second one, or a Host that is not a host name or address with an optional port',
  RateLimited: "The parent's management calls passed MANAGEMENT_RATE (`violated_policies`: `management.rate`)",
  HeadersTooLarge: 'More than 100 header fields, or more than 16 KiB of them',
}

export function errorResponse(name: ErrorResponse): OpenAPIV3_1.ResponseObject {
  const codes: readonly ErrorCode[] = ERROR_RESPONSES[name]
  const listed = codes.map((code) => `\`${code}\` (${ERRORS[code].title})`).join(', ')
  const what = name === 'Error' ? 'Any other failure; a 5xx shows no internals' : STATUS_CODES[ERRORS[codes[0]!].status]
  const response: OpenAPIV3_1.ResponseObject = {
    description: `${what}. \`code\`: ${listed}.${WHEN[name] === undefined ? '' : ` ${WHEN[name]}.`}`,
    content: { [PROBLEM_JSON]: { schema: ref('schemas', 'Problem') } },
  }
  if (codes.includes('idempotency_key_in_flight')) {
    response.headers = {
      'Retry-After': {
        description: '`1` on idempotency_key_in_flight: the first request with this Idempotency-Key still runs',
        schema: { type: 'integer' },
      },
    }
  }
  if (name === 'RateLimited') {
    response.headers = {
      'Retry-After': { description: 'whole seconds until a call may succeed', schema: { type: 'integer' } },
      'RateLimit-Policy': {
        description: 'the limit: `"management.rate";q=<calls>;w=<seconds>`',
        schema: { type: 'string' },
      },
      RateLimit: {
        description: 'what is left of it: `"management.rate";r=<left>;t=<seconds>`',
        schema: { type: 'string' },
      },
    }
  }
  if (name === 'Unauthenticated' || name === 'Forbidden') {
    response.headers = {
      'WWW-Authenticate': {
        description:
          '`Bearer` on a 401 (`Bearer error="invalid_token", error_description="the key has expired"` on ' +
          'key_expired); `Bearer error="insufficient_scope", scope="…"` on insufficient_scope (docs/api.md)',
        schema: { type: 'string' },
      },
    }
  }
  return response
}

// The problem envelope of docs/api.md. Further members are allowed: RFC 9457 §3.2 extensions
// (/readyz adds its checks).
export const PROBLEM_SCHEMA: OpenAPIV3_1.SchemaObject = {
  type: 'object',
  description: 'Every error of the gateway: RFC 9457 problem details, as application/problem+json.',
  required: ['type', 'title', 'status', 'detail', 'code', 'request_id'],
  properties: {
    type: { type: 'string', format: 'uri', examples: ['urn:tenancy-gateway:error:not_found'] },
    title: { type: 'string', description: 'the same for every occurrence of a code' },
    status: { type: 'integer', minimum: 400, maximum: 599 },
    detail: { type: 'string' },
    code: { type: 'string', enum: Object.keys(ERRORS), description: 'stable and snake_case: the field to branch on' },
    request_id: { type: 'string', description: 'the X-Request-Id of the response' },
    errors: {
      type: 'array',
      description: 'validation_failed only: one entry per refused field',
      items: {
        type: 'object',
        required: ['path', 'message'],
        properties: {
          path: {
            type: 'string',
            description: 'a JSON pointer into the request, such as /body/name or /querystring/limit',
          },
          message: { type: 'string' },
        },
        additionalProperties: false,
      },
    },
  },
}

// docs/api.md: `self`, a UUID in either case, or `ext:` and an external id.
export const ACTING_TENANT: OpenAPIV3_1.ParameterObject = {
  name: 'X-Service-Acting-Tenant',
  in: 'header',
  required: false,
  description:
    'The tenant the request acts as: `self`, a sub-account UUID, or `ext:<external_id>` (docs/api.md). ' +
    'Required on writes once the account has an active sub-account. The management API is used acting as ' +
    'the parent itself (`self`): acting as a sub-account there is refused with 403 `parent_key_required`.',
  schema: {
    type: 'string',
    anyOf: [{ enum: ['self'] }, { pattern: UUID_PATTERN }, { pattern: `^ext:${EXTERNAL_ID_PATTERN.slice(1)}` }],
  },
  example: 'self',
}

// docs/api.md, Idempotency.
export const IDEMPOTENCY_KEY: OpenAPIV3_1.ParameterObject = {
  name: 'Idempotency-Key',
  in: 'header',
  required: false,
  description:
    'Makes the write safe to retry (docs/api.md, Idempotency): the first request with a key runs and its ' +
    'answer is kept 24 h for the calling key; the same method, path and body again get that answer, with ' +
    '`Idempotent-Replayed: true`; another request with the key: 422 `idempotency_key_reused`; while the first ' +
    'still runs: 409 `idempotency_key_in_flight`. A 400 or a 5xx is not kept, unless the change committed all ' +
    'the same: then 409 `idempotency_answer_lost`, and the change is not made again.',
  schema: { type: 'string', minLength: 1, maxLength: 255, pattern: '^[\\x20-\\x7E]+$' },
}
