// What the route schemas do not say, added to the OpenAPI document only (ops/openapi.ts): the
// acting header, the Idempotency-Key, the problem+json errors of each operation, the bodies read
// as streams or bytes, the Location headers, and POST /verify, which is served on another port.
// An error response schema on a route would also become its serializer, and change the bodies the
// error handler sends.
import { STATUS_CODES } from 'node:http'
import type { OpenAPIV3_1 } from 'openapi-types'
import { IMPORT_REQUEST_BODY } from '../schemas/key-imports.js'
import { GitHubReport } from '../schemas/key-leaks.js'
import { VerifyAnswer, VerifyQuestion } from '../schemas/verify.js'
import { JWKS_PATH, MANAGEMENT_PREFIX, SECRET_SCANNING_GITHUB_PATH, TOKEN_PATH, VERIFY_PATH } from '../shared/paths.js'
import { type ErrorResponse, PROBLEM_JSON, ref } from './openapi-components.js'

export function isManagementUrl(url: string): boolean {
  return url === MANAGEMENT_PREFIX || url.startsWith(`${MANAGEMENT_PREFIX}/`)
}

/** The refusals a management operation can answer with (docs/api.md), by status. */
function managementErrors(
  method: string,
  path: string,
  operation: OpenAPIV3_1.OperationObject,
): Record<string, ErrorResponse> {
  const errors: Record<string, ErrorResponse> = { 400: 'BadRequest', 401: 'Unauthenticated', 403: 'Forbidden' }
  if (path.includes('{')) errors[404] = 'NotFound'
  const requestBody = operation.requestBody as OpenAPIV3_1.RequestBodyObject | undefined
  const body = requestBody?.content['application/json']?.schema as OpenAPIV3_1.SchemaObject | undefined
  if (body?.properties?.external_id !== undefined) errors[409] = 'Conflict'
  if (path.endsWith('/roll')) errors[409] = 'KeyNotActive'
  if (method === 'post' && path.endsWith('/webhook-endpoints')) errors[409] = 'EndpointConflict'
  if (method === 'post' && path.endsWith('/portal-sessions')) errors[409] = 'SessionLimit'
  if (method === 'delete' && path.endsWith('/plans/{plan_id}')) errors[409] = 'PlanInUse'
  if (method === 'post' && (path.endsWith('/test') || path.endsWith('/retry'))) errors[409] = 'EndpointDisabled'
  if (method === 'post' || method === 'patch') {
    errors[409] ??= 'InFlight'
    errors[422] = 'KeyReused'
  }
  // A write may carry a body whatever its schema: too large, too slow or not JSON is refused before validation.
  if (method !== 'get')
    Object.assign(errors, { 408: 'RequestTimeout', 413: 'PayloadTooLarge', 415: 'UnsupportedMediaType' })
  errors[429] = 'RateLimited'
  errors[503] = 'StoreUnavailable'
  errors.default = 'Error'
  return errors
}

/** GitHub's report, read as bytes for its signature: documented here rather than validated by a schema. */
const GITHUB_REPORT_BODY: OpenAPIV3_1.RequestBodyObject = {
  required: true,
  content: { 'application/json': { schema: GitHubReport as OpenAPIV3_1.SchemaObject } },
}

/**
 * POST /verify (docs/api.md, Verifying a key): served on AUTHZ_PORT only, never on PORT, where this
 * document is; its own `servers` says so. Its body is read by the decisions' listener, not a route,
 * so it is described here.
 */
const VERIFY_PATH_ITEM = {
  servers: [
    {
      url: 'http://{host}:{authz_port}',
      description: "The gateway's AUTHZ_PORT: reachable only by the services it decides for, never PORT",
      variables: { host: { default: 'localhost' }, authz_port: { default: '9092' } },
    },
  ],
  post: {
    operationId: 'verifyKey',
    summary: 'Verify a key for a request (AUTHZ_PORT)',
    description:
      'For a service behind no proxy: the decision the proxy would make for a request with this key, acting ' +
      'header, method and path (its route, scopes, allow-lists, limits and cost), counted as that request. ' +
      'Always 200 with `valid`: a refusal is `{"valid": false, "code", "status"}` with what the proxy would ' +
      'have answered. AUTHZ_PORT has no key of its own: bind it where only your services reach it.',
    tags: ['credentials'],
    security: [],
    requestBody: {
      required: true,
      content: { 'application/json': { schema: VerifyQuestion as OpenAPIV3_1.SchemaObject } },
    },
    responses: {
      200: {
        description: 'The decision',
        content: { 'application/json': { schema: VerifyAnswer } },
      },
      400: ref('responses', 'BadRequest'),
      413: {
        description: 'payload_too_large: a body over 16 KiB',
        content: { [PROBLEM_JSON]: { schema: ref('schemas', 'Problem') } },
      },
    },
  },
}

/**
 * The writes whose body their handler reads as a stream (a key import): no body schema on the route,
 * so the document is told here, and they take no Idempotency-Key (an import is idempotent itself).
 */
const STREAMED_BODIES: Record<string, OpenAPIV3_1.RequestBodyObject> = {
  [`${MANAGEMENT_PREFIX}/api-keys/imports`]: IMPORT_REQUEST_BODY as OpenAPIV3_1.RequestBodyObject,
}

/** The writes whose body may be left out (their members all have defaults): a client need send none. */
const BODY_MAY_BE_ABSENT = new Set(['/v1/sub-accounts/{sub_id}/api-keys/{key_id}/roll'])

/** The 201s whose Location names what was made (docs/api.md): a sub-account, a rolled key, an endpoint. */
const LOCATED = new Set([
  '/v1/sub-accounts',
  '/v1/sub-accounts/{sub_id}/api-keys/{key_id}/roll',
  '/v1/sub-accounts/webhook-endpoints',
  '/v1/sub-accounts/plans',
])

const METHODS = new Set(['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'])

/** Whole-document additions: the acting header and the errors of every documented operation. */
export function completeDocument(document: OpenAPIV3_1.Document): OpenAPIV3_1.Document {
  const tagged = new Set<string>()
  for (const [path, item] of Object.entries(document.paths ?? {})) {
    for (const [method, value] of Object.entries(item ?? {})) {
      if (!METHODS.has(method)) continue
      const operation = value as OpenAPIV3_1.OperationObject
      for (const tag of operation.tags ?? []) tagged.add(tag)
      operation.responses ??= {}
      const responses = operation.responses
      for (const [status, response] of Object.entries(responses)) {
        if ('$ref' in response) continue
        if (response.description === 'Default Response') response.description = STATUS_CODES[status] ?? 'Response'
        // Every error is problem+json (docs/api.md), whatever the route schema calls it; but the
        // token endpoint's, which are RFC 6749's own JSON.
        const json = response.content?.['application/json']
        if (Number(status) >= 400 && json !== undefined && path !== TOKEN_PATH) {
          const empty = json.schema === undefined || Object.keys(json.schema).length === 0
          response.content = { [PROBLEM_JSON]: { schema: empty ? ref('schemas', 'Problem') : json.schema } }
        }
      }
      // The request guards' refusals (the token endpoint states its own, as RFC 6749 JSON).
      if (path !== TOKEN_PATH) responses[431] ??= ref('responses', 'HeadersTooLarge')
      if (!isManagementUrl(path)) {
        if (path !== TOKEN_PATH) responses[400] ??= ref('responses', 'HostRefused')
        if (path === JWKS_PATH) responses[503] ??= ref('responses', 'StoreUnavailable')
        if (path === SECRET_SCANNING_GITHUB_PATH) {
          operation.requestBody = GITHUB_REPORT_BODY
          Object.assign(responses, {
            400: responses[400] ?? ref('responses', 'BadRequest'),
            401: {
              description: 'signature_invalid: unsigned, wrongly signed, or under an unknown key',
              content: { [PROBLEM_JSON]: { schema: ref('schemas', 'Problem') } },
            },
            503: {
              description: "scanner_keys_unavailable: GitHub's keys could not be fetched",
              content: { [PROBLEM_JSON]: { schema: ref('schemas', 'Problem') } },
            },
          })
        }
        continue
      }
      operation.parameters = [...(operation.parameters ?? []), ref('parameters', 'ActingTenant')]
      const streamed = method === 'post' ? STREAMED_BODIES[path] : undefined
      if (streamed !== undefined) operation.requestBody = streamed
      else if (method === 'post' || method === 'patch') operation.parameters.push(ref('parameters', 'IdempotencyKey'))
      for (const [status, name] of Object.entries(managementErrors(method, path, operation))) {
        if (streamed !== undefined && (name === 'InFlight' || name === 'KeyReused')) continue
        responses[status] ??= ref('responses', name)
      }
      const body = operation.requestBody
      if (method === 'post' && BODY_MAY_BE_ABSENT.has(path) && body !== undefined && !('$ref' in body))
        body.required = false
      const created = responses[201]
      if (method === 'post' && LOCATED.has(path) && created !== undefined && !('$ref' in created)) {
        created.headers = {
          ...created.headers,
          Location: { description: 'the path of what was made', schema: { type: 'string' } },
        }
      }
    }
  }
  document.paths = { ...document.paths, [VERIFY_PATH]: VERIFY_PATH_ITEM as unknown as OpenAPIV3_1.PathItemObject }
  // Only the groups that hold an operation: with CONSOLE=off the portal's routes are not served,
  // and its tag would be an empty group on /docs.
  document.tags = document.tags?.filter((tag) => tagged.has(tag.name))
  return document
}
