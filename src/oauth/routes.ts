// The gateway as an OAuth 2.0 authorization server (docs/credentials.md): its metadata
// (RFC 8414) and its token endpoint. Both need no key and are never proxied.
import type { FastifyPluginAsync } from 'fastify'
import { AUTHORIZATION_SERVER_METADATA_PATH, JWKS_PATH, TOKEN_PATH } from '../shared/paths.js'
import { tokenEndpoint, type TokenEndpointOptions } from './token-endpoint.js'
import { AuthorizationServerMetadata } from './token-schemas.js'

/**
 * RFC 8414 §2. `response_types_supported` is required, but names what an authorization endpoint
 * answers, and the gateway has none: the honest list is empty
 * (docs/decisions/0023-response-types-supported-and-no-scopes-supported.md).
 * `scopes_supported` is left out: a parent names its keys' scopes freely, so no list is complete.
 */
export function authorizationServerMetadata(issuerUrl: string) {
  return {
    issuer: issuerUrl,
    token_endpoint: issuerUrl + TOKEN_PATH,
    jwks_uri: issuerUrl + JWKS_PATH,
    grant_types_supported: ['client_credentials'],
    token_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post'],
    response_types_supported: [],
  }
}

export interface OAuthRoutesOptions extends TokenEndpointOptions {
  /**
   * ISSUER_URL was not set: say so once the gateway listens
   * (docs/decisions/0062-issuer-url-keeps-its-default-and-says-so.md).
   */
  issuerUrlIsDefault?: boolean
}

/**
 * The default issuer (`http://localhost:<PORT>`) is right only for clients on the same machine
 * that call it `localhost`: a client that checks the metadata's `issuer` against the address it
 * fetched it from (RFC 8414 §3.3), or a token's `iss`, refuses it from anywhere else.
 */
function issuerDefaultWarning(issuerUrl: string): string {
  return (
    `ISSUER_URL is not set, so the issuer of access tokens, identity assertions and ${AUTHORIZATION_SERVER_METADATA_PATH} ` +
    `is ${issuerUrl}, which clients reaching the gateway at any other address (127.0.0.1, a host name) will not ` +
    'accept: set ISSUER_URL to the address clients use'
  )
}

export const oauthRoutes: FastifyPluginAsync<OAuthRoutesOptions> = async (app, options) => {
  const metadata = authorizationServerMetadata(options.issuerUrl)
  if (options.issuerUrlIsDefault)
    app.addHook('onListen', async () => {
      app.log.warn({ issuer: options.issuerUrl }, issuerDefaultWarning(options.issuerUrl))
    })
  app.get(
    AUTHORIZATION_SERVER_METADATA_PATH,
    {
      schema: {
        operationId: 'getAuthorizationServerMetadata',
        summary: 'The OAuth 2.0 authorization server metadata (RFC 8414)',
        tags: ['credentials'],
        response: { 200: AuthorizationServerMetadata },
      },
    },
    // It changes only with the configuration: clients may keep it as long as the JWKS.
    async (_request, reply) => reply.header('cache-control', 'public, max-age=300').send(metadata),
  )
  await app.register(tokenEndpoint, options)
}
