// Schemas of the OAuth documents (docs/credentials.md), for the OpenAPI document and as
// serializers: the token response, RFC 6749 errors, and the authorization server metadata.
import { Type } from 'typebox'

const FORM = 'application/x-www-form-urlencoded'

/** RFC 6749 §5.2. Its own shape, not problem+json: OAuth clients read `error`. */
export const OAuthErrorBody = Type.Object(
  {
    error: Type.String({
      description:
        'invalid_request, invalid_client, unsupported_grant_type or invalid_scope; ' +
        'temporarily_unavailable (503) and server_error (500) when the gateway fails',
    }),
    error_description: Type.String(),
  },
  { description: 'RFC 6749 §5.2 error' },
)

const errorResponse = (description: string) => ({ ...OAuthErrorBody, description })

export const tokenEndpointSchema = {
  operationId: 'issueAccessToken',
  summary: 'Exchanges a key id and its client secret for an access token (OAuth 2.0 client credentials)',
  description:
    'RFC 6749 §4.4. The client authenticates with HTTP Basic (`client_id` is the key id; both parts ' +
    'form-urlencoded before base64) or with `client_id` and `client_secret` in the form, never both. ' +
    'Errors are RFC 6749 JSON, not problem+json. Every answer carries `Cache-Control: no-store`.',
  tags: ['credentials'],
  consumes: [FORM],
  body: {
    content: {
      [FORM]: {
        schema: Type.Object({
          grant_type: Type.String({ enum: ['client_credentials'] }),
          scope: Type.Optional(
            Type.String({ description: "space-separated; each held by the key; default: all the key's" }),
          ),
          client_id: Type.Optional(Type.String({ description: 'the key id (client_secret_post)' })),
          client_secret: Type.Optional(Type.String({ description: 'the client secret, tgws_… (client_secret_post)' })),
        }),
      },
    },
  },
  response: {
    200: Type.Object(
      {
        access_token: Type.String({ description: 'a JWT (RFC 9068), typ at+jwt, ES256' }),
        token_type: Type.Literal('Bearer'),
        expires_in: Type.Integer({ description: 'seconds (ACCESS_TOKEN_TTL_SECONDS)' }),
        scope: Type.String({ description: 'the scopes the token carries, space-separated' }),
      },
      { description: 'The access token' },
    ),
    400: errorResponse(
      'invalid_request (not a form, a parameter repeated or missing, two client authentications), unsupported_grant_type, invalid_scope',
    ),
    401: errorResponse(
      'invalid_client: unknown key, wrong secret, revoked or expired key, deactivated sub-account, key without a secret; ' +
        'with WWW-Authenticate: Basic realm="tenancy-gateway"',
    ),
    431: errorResponse('invalid_request: more than 100 header fields, or more than 16 KiB of them'),
    429: errorResponse('invalid_client: 10 failed authentications of this client_id within a minute; see Retry-After'),
    503: errorResponse('temporarily_unavailable: the store did not answer; see Retry-After'),
  },
}

export const AuthorizationServerMetadata = Type.Object(
  {
    issuer: Type.String(),
    token_endpoint: Type.String(),
    jwks_uri: Type.String(),
    grant_types_supported: Type.Array(Type.String()),
    token_endpoint_auth_methods_supported: Type.Array(Type.String()),
    response_types_supported: Type.Array(Type.String()),
  },
  { additionalProperties: false, description: 'RFC 8414 authorization server metadata' },
)
