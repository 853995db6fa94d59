// An upstream that trusts only what the gateway signed (docs/credentials.md, "Signed identity for
// upstreams"): each request's X-Service-Identity is verified against the gateway's JWKS with
// `jose`, and the request is answered from the verified claims, never from the plain headers.
//
//   GATEWAY_URL=http://gateway:8080 ISSUER=https://api.example.com \
//   AUDIENCE=https://shipments.internal PORT=8080 node verify-identity.mjs
//
// GATEWAY_URL is where this service reaches the gateway; ISSUER is the gateway's ISSUER_URL
// (default GATEWAY_URL); AUDIENCE is the route's `identity.audience`.
import { createServer } from 'node:http'
import { createRemoteJWKSet, jwtVerify } from 'jose'

const gateway = process.env.GATEWAY_URL
const issuer = process.env.ISSUER ?? gateway
const audience = process.env.AUDIENCE

// Fetched on first use and kept five minutes (the JWKS's max-age: a key withdrawn with
// --compromised is refused here within that); fetched again when a token names a key it does not
// know yet (after a rotation), at most every 30 s.
const jwks = createRemoteJWKSet(new URL('/.well-known/jwks.json', gateway), { cacheMaxAge: 300_000 })

/** The verified claims of an assertion; throws when the signature, a time, iss, aud or typ is wrong. */
export async function verifyIdentity(token) {
  const { payload } = await jwtVerify(token, jwks, {
    issuer,
    audience,
    typ: 'JWT',
    algorithms: ['ES256'],
    requiredClaims: ['sub', 'caller_tenant', 'key_id', 'scope', 'iat', 'nbf', 'exp'],
    // The gateway's clock and this one may differ a little.
    clockTolerance: 5,
  })
  return payload
}

const server = createServer(async (request, response) => {
  const token = request.headers['x-service-identity']
  let identity
  try {
    if (typeof token !== 'string') throw new Error('no X-Service-Identity header')
    identity = await verifyIdentity(token)
  } catch (err) {
    response.writeHead(401, { 'content-type': 'application/json' })
    response.end(JSON.stringify({ error: 'invalid_identity', detail: err.code ?? err.message }))
    return
  }
  // sub: the tenant the request acts as; act.sub, when present: the parent acting for it.
  response.writeHead(200, { 'content-type': 'application/json' })
  response.end(
    JSON.stringify({
      tenant: identity.sub,
      acting_parent: identity.act?.sub ?? null,
      key_id: identity.key_id,
      scopes: identity.scope === '' ? [] : identity.scope.split(' '),
      claims: identity,
    }),
  )
})

server.listen(Number(process.env.PORT ?? 8080), () => {
  console.log(`verifying identities for ${audience} on port ${server.address().port}`)
})
