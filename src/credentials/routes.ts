// The gateway's public credential documents (docs/credentials.md): the JSON Web Key Set that
// verifiers of access tokens and identity assertions fetch. Needs no key; never proxied.
import type { FastifyPluginAsync } from 'fastify'
import { Type } from 'typebox'
import type { Keyring } from './keyring.js'

export const JWKS_PATH = '/.well-known/jwks.json'
export const TOKEN_PATH = '/oauth2/token'
export const AUTHORIZATION_SERVER_METADATA_PATH = '/.well-known/oauth-authorization-server'

/** The credential paths: the gateway answers them itself, and no route may take them. */
export const CREDENTIAL_PATHS = [JWKS_PATH, TOKEN_PATH, AUTHORIZATION_SERVER_METADATA_PATH] as const

export interface CredentialRoutesOptions {
  keyring: Keyring
}

const Jwks = Type.Object({
  keys: Type.Array(
    Type.Object(
      {
        kty: Type.String(),
        crv: Type.String(),
        x: Type.String(),
        y: Type.String(),
        kid: Type.String(),
        alg: Type.String(),
        use: Type.String(),
      },
      { additionalProperties: false },
    ),
  ),
})

export const credentialRoutes: FastifyPluginAsync<CredentialRoutesOptions> = async (app, { keyring }) => {
  app.get(
    JWKS_PATH,
    {
      schema: {
        summary: 'The public keys that verify access tokens and identity assertions (RFC 7517)',
        tags: ['credentials'],
        response: { 200: Jwks },
      },
    },
    // Verifiers may keep it five minutes: a key is published ten minutes before it signs.
    async (_request, reply) => reply.header('cache-control', 'public, max-age=300').send(keyring.jwks()),
  )
}
