// OpenAPI 3.1 at /openapi.json and a docs page at /docs (docs/operations.md), generated from the route
// schemas. Registered before any route, so that every route is seen.
//
// What the route schemas do not say (the key, the acting header, the problem+json errors) is added
// to the document only, by @fastify/swagger's transform hooks: an error response schema on a route
// would also become its serializer, and change the bodies the error handler sends.
import { readFileSync } from 'node:fs'
import { STATUS_CODES } from 'node:http'
import type { FastifyInstance } from 'fastify'
import { VerifyAnswer, VerifyQuestion } from '../schemas/verify.js'
import swagger, { type SwaggerTransform, type SwaggerTransformObject } from '@fastify/swagger'
import swaggerUi from '@fastify/swagger-ui'
import type { OpenAPIV3_1 } from 'openapi-types'
import { IMPORT_REQUEST_BODY } from '../schemas/key-imports.js'
import { GitHubReport } from '../schemas/key-leaks.js'
import {
  AUTHORIZATION_SERVER_METADATA_PATH,
  JWKS_PATH,
  MANAGEMENT_PREFIX,
  SECRET_SCANNING_GITHUB_PATH,
  TOKEN_PATH,
  VERIFY_PATH,
} from '../shared/paths.js'
import {
  ACTING_TENANT,
  ERROR_RESPONSES,
  type ErrorResponse,
  errorResponse,
  IDEMPOTENCY_KEY,
  PROBLEM_JSON,
  PROBLEM_SCHEMA,
  ref,
} from './openapi-components.js'

export const OPENAPI_PATH = '/openapi.json'
export const DOCS_PREFIX = '/docs'

/** Routes served without a key that belong in the document (the docs' own routes do not). */
const PUBLIC_OPERATIONS = new Set([
  '/healthz',
  '/readyz',
  JWKS_PATH,
  AUTHORIZATION_SERVER_METADATA_PATH,
  SECRET_SCANNING_GITHUB_PATH,
])

const BEARER = 'bearerAuth'
const CLIENT_BASIC = 'clientSecretBasic'

// Read at run time: @fastify/swagger's default is the version of its own package.json. The same
// relative path holds from src/ops (tsx) and from dist/ops (the image has package.json too).
function packageVersion(): string {
  const pkg: unknown = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8'))
  const version = (pkg as { version?: unknown }).version
  if (typeof version !== 'string') throw new Error('package.json has no version')
  return version
}

function baseDocument(): OpenAPIV3_1.Document {
  return {
    openapi: '3.1.0',
    info: {
      title: 'tenancy-gateway',
      version: packageVersion(),
      description:
        'A reverse proxy that lets a parent account own sub-accounts and act as any of them. This document ' +
        'describes what the gateway answers itself: the management API under `/v1/sub-accounts` and the health ' +
        'endpoints, and the OAuth 2.0 token endpoint with its metadata and keys. Every other path is proxied to ' +
        'an upstream and is not described here. Every error is `application/problem+json` (`Problem`) with a ' +
        'stable `code`, except those of the token endpoint, which are RFC 6749 JSON (`{"error", "error_description"}`).',
      license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
    },
    // Relative: the gateway that serves this document, wherever it is deployed (OpenAPI 3.1 §4.8.5).
    servers: [{ url: '/', description: 'The gateway that serves this document' }],
    tags: [
      { name: 'sub-accounts', description: 'The sub-accounts of the calling parent account' },
      { name: 'api-keys', description: "A sub-account's API keys; a key's secrets are shown once, when it is created" },
      { name: 'usage', description: 'Requests counted per sub-account and day' },
      { name: 'limits', description: "The calling parent's account limits and this month's use" },
      { name: 'credits', description: "A sub-account's prepaid credits: grants of a meter's units, and the balances" },
      { name: 'routes', description: 'The routes the gateway proxies and the state of their targets' },
      {
        name: 'plans',
        description: "Limits and key policies defined once and given to many sub-accounts; the account's default plan",
      },
      { name: 'events', description: "The audit log: every change to the calling parent's account, newest first" },
      { name: 'requests', description: "The request log: what the parent's integrations sent, and what they got" },
      {
        name: 'webhooks',
        description: "The calling parent's webhook endpoints; a secret is shown once, when it is made",
      },
      {
        name: 'portal',
        description:
          "Sessions of the sub-account portal, a page for a sub-account's people (its keys, usage, requests)",
      },
      { name: 'operations', description: 'Liveness and readiness; no key needed' },
      {
        name: 'secret-scanning',
        description: "Leaked keys reported by GitHub's secret scanning, signed by GitHub; no key needed",
      },
      {
        name: 'credentials',
        description: 'Access tokens for sub-account keys (OAuth 2.0 client credentials) and the keys that sign them',
      },
    ],
    components: {
      securitySchemes: {
        [BEARER]: {
          type: 'http',
          scheme: 'bearer',
          bearerFormat: 'tgw_… or an access token (JWT)',
          description:
            'An API key: `tgw_`, 43 base62 characters and a 6-character checksum (docs/api.md), or an access ' +
            'token from POST /oauth2/token, which works wherever its key does, with its own scopes. The management ' +
            'API takes parent keys only, with `sub_accounts:read` for GET and `sub_accounts:write` for POST, PATCH and DELETE.',
        },
        [CLIENT_BASIC]: {
          type: 'http',
          scheme: 'basic',
          description:
            'client_secret_basic (RFC 6749 §2.3.1): the key id and its client secret, each form-urlencoded, ' +
            'joined by `:`. Alternatively `client_id` and `client_secret` in the form.',
        },
      },
      parameters: { ActingTenant: ACTING_TENANT, IdempotencyKey: IDEMPOTENCY_KEY },
      schemas: { Problem: PROBLEM_SCHEMA },
      responses: Object.fromEntries(
        (Object.keys(ERROR_RESPONSES) as ErrorResponse[]).map((name) => [name, errorResponse(name)]),
      ),
    },
  }
}

function isManagementUrl(url: string): boolean {
  return url === MANAGEMENT_PREFIX || url.startsWith(`${MANAGEMENT_PREFIX}/`)
}

/** Management and health operations are documented; the rest (proxied wildcards, the docs' own routes) hidden. */
const documentRoute: SwaggerTransform = ({ schema, url }) => {
  if (isManagementUrl(url)) {
    // A route at the plugin's root answers `/v1/sub-accounts` and `/v1/sub-accounts/`, and reaches
    // this hook as the second (fastify reuses the route's options for both): document the first.
    return { schema: { ...schema, security: [{ [BEARER]: [] }] }, url: url.endsWith('/') ? url.slice(0, -1) : url }
  }
  // Basic, or nothing in the headers when the client authenticates in the form.
  const basicOrForm: { [scheme: string]: readonly string[] }[] = [{ [CLIENT_BASIC]: [] }, {}]
  if (url === TOKEN_PATH) return { schema: { ...schema, security: basicOrForm }, url }
  return { schema: { ...schema, ...(PUBLIC_OPERATIONS.has(url) ? { security: [] } : { hide: true }) }, url }
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
function completeDocument(document: OpenAPIV3_1.Document): OpenAPIV3_1.Document {
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

const completeObject: SwaggerTransformObject = (documentObject) =>
  'openapiObject' in documentObject
    ? completeDocument(documentObject.openapiObject as OpenAPIV3_1.Document)
    : documentObject.swaggerObject

// The plugin's `staticCSP: true` without https: sources, validator.swagger.io (the validator badge is
// off: nothing leaves for the internet) and upgrade-insecure-requests, which breaks the page on a
// plain-HTTP port (a kubectl port-forward, `npm start`). Inline scripts and styles stay refused.
const DOCS_CSP = [
  "default-src 'self'",
  "base-uri 'self'",
  "connect-src 'self'",
  "font-src 'self' data:",
  "form-action 'self'",
  "frame-ancestors 'none'",
  "img-src 'self' data:", // the top bar's logo is a data: URL
  "object-src 'none'",
  "script-src 'self'",
  "script-src-attr 'none'",
  "style-src 'self'",
].join('; ')

export async function registerOpenApi(app: FastifyInstance): Promise<void> {
  await app.register(swagger, {
    openapi: baseDocument(),
    transform: documentRoute,
    transformObject: completeObject,
  })

  // Swagger UI's files come from the package itself: the page works offline. No key is asked
  // here: authentication is a hook of the management and proxy plugins only.
  await app.register(swaggerUi, {
    routePrefix: DOCS_PREFIX,
    staticCSP: DOCS_CSP,
    theme: { title: 'tenancy-gateway API' },
    uiConfig: { validatorUrl: null },
  })

  app.get(OPENAPI_PATH, { schema: { hide: true } }, async () => app.swagger())
}
