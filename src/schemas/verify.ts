// TypeBox schemas of POST /verify on AUTHZ_PORT (docs/api.md, Verifying a key), for the OpenAPI
// document only: the listener checks the body field by field itself (forward-auth/verify.ts), as
// it is read before the app's router sees it.
import { Type } from 'typebox'
import { Nullable } from './common.js'

export const VerifyQuestion = Type.Object(
  {
    key: Type.String({ minLength: 1, description: 'the API key or access token to verify' }),
    acting_tenant: Type.Optional(
      Nullable(
        Type.String({ description: 'as X-Service-Acting-Tenant: self, a sub-account id, or ext:<external_id>' }),
      ),
    ),
    method: Type.Optional(
      Type.String({ pattern: '^[A-Z]{1,32}$', description: "the request's method; default GET", examples: ['POST'] }),
    ),
    path: Type.Optional(
      Type.String({
        pattern: '^/',
        description: "the request's path and query, which pick its route; default /",
        examples: ['/v1/orders/42'],
      }),
    ),
    cost: Type.Optional(
      Type.Integer({ minimum: 1, maximum: 1_000_000, description: "request units, in place of the route's cost" }),
    ),
  },
  { additionalProperties: false },
)

export const VerifyAnswer = Type.Union([
  Type.Object(
    {
      valid: Type.Literal(true),
      key_id: Nullable(Type.String({ format: 'uuid' })),
      caller_tenant_id: Nullable(Type.String({ format: 'uuid' })),
      resolved_tenant_id: Nullable(Type.String({ format: 'uuid' })),
      scopes: Type.Array(Type.String()),
      ratelimit: Nullable(
        Type.Object(
          {
            policy: Type.String({ description: 'the RateLimit-Policy field' }),
            current: Type.String({ description: 'the RateLimit field' }),
          },
          { additionalProperties: false },
        ),
      ),
    },
    { additionalProperties: false, description: 'allowed: who the key is, as whom it acts, and its limits now' },
  ),
  Type.Object(
    {
      valid: Type.Literal(false),
      code: Type.String({ description: 'the problem code the proxy would answer', examples: ['rate_limited'] }),
      status: Type.Integer({ description: 'the status the proxy would answer', examples: [429] }),
    },
    { additionalProperties: false, description: 'refused: what the proxy would have answered' },
  ),
])
