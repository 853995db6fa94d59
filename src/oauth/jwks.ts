// The gateway's public credential documents (docs/credentials.md): the JSON Web Key Set that
// verifiers of access tokens and identity assertions fetch. Needs no key; never proxied.
import type { FastifyPluginAsync } from 'fastify'
import { Type } from 'typebox'
import { ApiError } from '../errors.js'
import { JWKS_PATH } from '../shared/paths.js'
import type { Keyring } from '../signing-keys/keyring.js'

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
        operationId: 'getJsonWebKeySet',
        summary: 'The public keys that verify access tokens and identity assertions (RFC 7517)',
        description:
          '503 (application/problem+json, code store_unavailable) while this replica has loaded no signing key yet.',
        tags: ['credentials'],
        response: { 200: Jwks },
      },
    },
    async (_request, reply) => {
      const jwks = keyring.jwks()
      // Empty only before the first load (Postgres away at start): an answer that a verifier or a
      // shared cache would keep for five minutes while other replicas sign.
      if (jwks.keys.length === 0)
        throw new ApiError('store_unavailable', 'no signing key is loaded yet (the store cannot be reached); try again')
      // Verifiers may keep it five minutes: a key is published ten minutes before it signs.
      return reply.header('cache-control', 'public, max-age=300').send(jwks)
    },
  )
}
