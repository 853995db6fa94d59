// The OpenAPI document as it starts (ops/openapi.ts): its info, tags, security schemes and reusable
// components; the routes' schemas fill its paths, and openapi-completion.ts adds what they do not say.
import { readFileSync } from 'node:fs'
import type { OpenAPIV3_1 } from 'openapi-types'
import {
  ACTING_TENANT,
  ERROR_RESPONSES,
  type ErrorResponse,
  errorResponse,
  IDEMPOTENCY_KEY,
  PROBLEM_SCHEMA,
} from './openapi-components.js'

export const BEARER = 'bearerAuth'
export const CLIENT_BASIC = 'clientSecretBasic'

// Read at run time: @fastify/swagger's default is the version of its own package.json. The same
// relative path holds from src/ops (tsx) and from dist/ops (the image has package.json too).
function packageVersion(): string {
  const pkg: unknown = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8'))
  const version = (pkg as { version?: unknown }).version
  if (typeof version !== 'string') throw new Error('package.json has no version')
  return version
}

export function baseDocument(): OpenAPIV3_1.Document {
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
