// OpenAPI 3.1 at /openapi.json and a docs page at /docs (docs/operations.md), generated from the route
// schemas. Registered before any route, so that every route is seen.
//
// What the route schemas do not say (the key, the acting header, the problem+json errors) is added
// to the document only, by @fastify/swagger's transform hooks (openapi-completion.ts): an error
// response schema on a route would also become its serializer, and change the bodies the error
// handler sends. The document starts as openapi-document.ts makes it.
import type { FastifyInstance } from 'fastify'
import swagger, { type SwaggerTransform, type SwaggerTransformObject } from '@fastify/swagger'
import swaggerUi from '@fastify/swagger-ui'
import type { OpenAPIV3_1 } from 'openapi-types'
import {
  AUTHORIZATION_SERVER_METADATA_PATH,
  JWKS_PATH,
  SECRET_SCANNING_GITHUB_PATH,
  TOKEN_PATH,
} from '../shared/paths.js'
import { completeDocument, isManagementUrl } from './openapi-completion.js'
import { BEARER, baseDocument, CLIENT_BASIC } from './openapi-document.js'

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
