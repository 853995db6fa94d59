// Credentials end to end across two replicas (docs/credentials.md): gateways A and B share one
// database (and so the stored signing keys) and one Redis prefix, and send signed identity to a
// real upstream. A token from A's token endpoint and the assertions both replicas hold are ended
// everywhere within 1 s by the operator's `signing-keys rotate --compromised`, cached or not; a
// key that expires ends its tokens on both without any message.
import { createRemoteJWKSet, decodeProtectedHeader, jwtVerify } from 'jose'
import t from 'tap'
import { cli } from '../helpers/cli.js'
import { startGateway, type TestGateway, startReplicas } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { eventually } from '../helpers/poll.js'
import { REDIS_URL, redisClient, untilSubscribed } from '../helpers/redis.js'
import { accessToken, clientKey } from '../helpers/tokens.js'
import { startUpstream } from '../helpers/upstream.js'

const AUDIENCE = 'orders-service'
const upstream = await startUpstream(t)
const routes = {
  routes: [{ prefix: '/v1/orders', upstream: upstream.url, identity: { audience: AUDIENCE, ttl_seconds: 300 } }],
}
// Entries live a minute in process: only the messages (or the clock, for an expiry) explain a change.
const cacheTimings = { localTtlMs: 60_000, negativeTtlMs: 60_000 }
const [a, b] = (await startReplicas(t, 2, { gatewayConfig: routes, cacheTimings })) as [TestGateway, TestGateway]
const redis = redisClient(t)
await untilSubscribed(redis, a.redisKeyPrefix!, 2)

const parent = await a.createParent()
const read = (gw: TestGateway, credential: string) => callAs(gw.url, credential, { path: '/v1/orders/1' })

/** The X-Service-Identity the upstream received last, and the key that signed it. */
function lastAssertion(): { token: string; kid: string } {
  const token = upstream.received.at(-1)!.headers['x-service-identity'] as string
  return { token, kid: decodeProtectedHeader(token).kid! }
}

t.test('--compromised ends tokens and assertions of the old key on both replicas within 1 s', async (t) => {
  const client = await clientKey(a.url, parent)
  const token = await accessToken(a.url, client)
  const old = decodeProtectedHeader(token).kid!
  // Both replicas verify and remember the token, and cache an assertion signed by the old key.
  for (const gw of [a, b])
    for (let i = 0; i < 2; i++) t.equal((await read(gw, token)).status, 200, `${gw === a ? 'A' : 'B'} admits it`)
  t.equal(lastAssertion().kid, old, 'the assertions are signed by the old key')
  const jwks = createRemoteJWKSet(new URL(`${b.url}/.well-known/jwks.json`))
  await jwtVerify(lastAssertion().token, jwks, { audience: AUDIENCE, typ: 'JWT' })

  const operator = cli({ DATABASE_URL: a.database.url, REDIS_URL, REDIS_KEY_PREFIX: a.redisKeyPrefix! })
  const rotated = await operator.ok(t, ['signing-keys', 'rotate', '--compromised'])
  const fresh = (rotated.signing_key as { kid: string }).kid
  t.not(fresh, old)
  for (const gw of [a, b]) {
    const name = gw === a ? 'A' : 'B'
    const refused = await eventually(1_000, async () => (await read(gw, token)).status === 401)
    t.not(refused, null, `${name} refuses the old key's token within 1 s, though it remembered it`)
    const byKey = await read(gw, client.apiKey)
    t.equal(byKey.status, 200, `${name} still admits the key itself`)
    t.equal(lastAssertion().kid, fresh, `${name} sends an assertion signed by the fresh key, not the cached one`)
    const published = (await callAs(gw.url, null, { path: '/.well-known/jwks.json' })).json().keys as { kid: string }[]
    t.same(
      published.map((k) => k.kid),
      [fresh],
      `${name}'s JWKS no longer lists the old key`,
    )
  }
  // A verifier that fetches the JWKS now refuses what the old key signed (one that cached it
  // earlier keeps it for its cache's age: docs/credentials.md).
  await t.rejects(
    jwtVerify(
      upstream.received.find((r) => r.headers['x-service-identity'])!.headers['x-service-identity'] as string,
      createRemoteJWKSet(new URL(`${a.url}/.well-known/jwks.json`)),
      {
        audience: AUDIENCE,
      },
    ),
    'a verifier refuses what the old key signed',
  )
  const renewed = await accessToken(b.url, client)
  t.equal(decodeProtectedHeader(renewed).kid, fresh, 'new tokens are signed by the fresh key')
  t.equal((await read(a, renewed)).status, 200, 'and work on the other replica')
})

t.test('a replica that missed the message: the same, by its reload', async (t) => {
  // C shares the database but not the bus (another prefix): every message is lost to it.
  const c = await startGateway(t, {
    gatewayConfig: routes,
    cacheTimings,
    database: a.database,
    signingKeys: { reloadIntervalMs: 500 },
  })
  const client = await clientKey(a.url, parent)
  const token = await accessToken(a.url, client)
  const old = decodeProtectedHeader(token).kid!
  for (let i = 0; i < 2; i++) t.equal((await read(c, token)).status, 200, 'C admits the token and remembers it')
  t.equal(lastAssertion().kid, old, "C's assertion is signed by the old key")
  const cached = lastAssertion().token
  t.equal((await read(c, token)).status, 200)
  t.equal(lastAssertion().token, cached, 'and C reuses it')

  const operator = cli({ DATABASE_URL: a.database.url, REDIS_URL, REDIS_KEY_PREFIX: a.redisKeyPrefix! })
  const fresh = ((await operator.ok(t, ['signing-keys', 'rotate', '--compromised'])).signing_key as { kid: string }).kid
  const refused = await eventually(10_000, async () => (await read(c, token)).status === 401)
  t.not(refused, null, "C refuses the old key's token once it has reloaded, though it remembered it")
  t.equal((await read(c, client.apiKey)).status, 200)
  t.equal(lastAssertion().kid, fresh, 'C sends an assertion signed by the fresh key, not the cached one')
  const published = (await callAs(c.url, null, { path: '/.well-known/jwks.json' })).json().keys as { kid: string }[]
  t.same(
    published.map((k) => k.kid),
    [fresh],
    "C's JWKS no longer lists the old key",
  )
})

t.test('a key that expires ends its tokens on both replicas, with no message', async (t) => {
  const client = await clientKey(a.url, parent)
  const expiresAt = Date.now() + 2_500
  // A key of the same sub-account, minted to expire in a moment.
  const minted = await callAs(a.url, parent.apiKey, {
    method: 'POST',
    path: `/v1/sub-accounts/${client.subId}/api-keys`,
    acting: 'self',
    json: { name: 'short', scopes: ['orders:read'], expires_at: new Date(expiresAt).toISOString() },
  })
  t.equal(minted.status, 201, minted.body)
  const short = { ...client, keyId: minted.json().id as string, clientSecret: minted.json().client_secret as string }
  const token = await accessToken(a.url, short)
  for (const gw of [a, b]) t.equal((await read(gw, token)).status, 200, 'admitted before the expiry')
  for (const gw of [a, b]) {
    const start = Date.now()
    const took = await eventually(expiresAt - start + 1_000, async () => (await read(gw, token)).status === 401)
    t.not(took, null, `${gw === a ? 'A' : 'B'} refuses the token within 1 s of the expiry`)
    t.ok(start + took! >= expiresAt, 'not before it')
    t.equal(JSON.parse((await read(gw, token)).body).code, 'key_expired', 'answered as its key would be')
  }
})
