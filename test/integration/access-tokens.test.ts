// Access tokens as credentials (docs/credentials.md), over real sockets to a real upstream: a
// token works wherever its key does, with its own scopes, answered as its key would be; a token
// that is not exactly one of the gateway's is refused with 401 and never reaches the upstream;
// a verified token is remembered, so that repeating it costs no signature check.
import { exportSPKI, generateKeyPair, importJWK, type JWTPayload, SignJWT, UnsecuredJWT } from 'jose'
import t, { type Test } from 'tap'
import { generateSigningKey, Keyring } from '../../src/signing-keys/keyring.js'
import { metricValue, recentAdmissions, startGateway } from '../helpers/gateway.js'
import { callAs, type RawResponse } from '../helpers/http.js'
import { sleep } from '../helpers/poll.js'
import { checkProblem } from '../helpers/problems.js'
import { accessToken, clientKey } from '../helpers/tokens.js'
import { startUpstream } from '../helpers/upstream.js'

const ISSUER = 'https://gateway.test'
const upstream = await startUpstream(t)
const gw = await startGateway(t, {
  // A keyring this file changes at will (the stored, rotated one: signing-keys.test.ts).
  keyring: await Keyring.ephemeral(),
  upstreamUrl: upstream.url,
  env: { ISSUER_URL: ISSUER },
  gatewayConfig: {
    routes: [
      { prefix: '/v1/orders', upstream: upstream.url, scopes: { read: ['orders:read'], write: ['orders:write'] } },
    ],
  },
})
const parent = await gw.createParent()
const client = await clientKey(gw.url, parent)

const verifications = (outcome: 'valid' | 'invalid') =>
  metricValue(gw.app, 'tgw_token_verifications_total', { outcome })
const serviceHeaders = (res: RawResponse) =>
  Object.fromEntries(
    Object.entries(res.json().headers as Record<string, string>).filter(([n]) => n.startsWith('x-service-')),
  )

/** A token signed with the gateway's own key, with claims a test chooses (what an insider could make). */
async function signedHere(
  claims: JWTPayload,
  options: { typ?: string; ttlSeconds?: number; now?: number } = {},
): Promise<string> {
  const base = {
    iss: ISSUER,
    aud: ISSUER,
    sub: client.keyId,
    client_id: client.keyId,
    tenant_id: client.subId,
    parent_id: client.parentId,
    scope: 'orders:read',
    jti: crypto.randomUUID(),
  }
  const signed = await gw.app.keyring.sign(
    { ...base, ...claims },
    { typ: options.typ ?? 'at+jwt', ttlSeconds: options.ttlSeconds ?? 900, now: options.now },
  )
  return signed.token
}

t.test('a token works on a proxied route: the upstream sees what it sees for the key', async (t) => {
  const token = await accessToken(gw.url, client)
  const byKey = await callAs(gw.url, client.apiKey, { path: '/v1/orders/1' })
  const byToken = await callAs(gw.url, token, { path: '/v1/orders/1' })
  t.equal(byKey.status, 200, 'the key')
  t.equal(byToken.status, 200, `the token (${byToken.body.slice(0, 200)})`)
  t.same(serviceHeaders(byToken), serviceHeaders(byKey), 'the same X-Service-* headers')
  t.match(serviceHeaders(byToken), {
    'x-service-resolved-tenant': client.subId,
    'x-service-caller-tenant': client.subId,
    'x-service-key-id': client.keyId,
    'x-service-scopes': 'orders:read orders:write',
  })
  t.notOk('authorization' in byToken.json().headers, 'the token is not forwarded')
  const write = await callAs(gw.url, token, { method: 'POST', path: '/v1/orders', body: '{}' })
  t.equal(write.status, 200, 'a write with the write scope')
  const catchAll = await callAs(gw.url, token, { path: '/v1/elsewhere' })
  t.equal(catchAll.status, 200, 'the catch-all route')
})

t.test("a token holds its own scopes, not all its key's", async (t) => {
  const token = await accessToken(gw.url, client, 'orders:read')
  const read = await callAs(gw.url, token, { path: '/v1/orders/1' })
  t.equal(read.status, 200)
  t.equal(serviceHeaders(read)['x-service-scopes'], 'orders:read', 'X-Service-Scopes: the token scopes')
  const write = await callAs(gw.url, token, { method: 'POST', path: '/v1/orders', body: '{}' })
  checkProblem(t, write, 403, 'insufficient_scope', 'a write')
  t.match(String(write.headers['www-authenticate']), /error="insufficient_scope"/)
})

t.test('the management API answers a token as its key', async (t) => {
  const token = await accessToken(gw.url, client)
  const calls: [string, string][] = [
    ['GET', '/v1/sub-accounts'],
    ['POST', '/v1/sub-accounts'],
  ]
  for (const [method, path] of calls) {
    const byKey = await callAs(gw.url, client.apiKey, {
      method,
      path,
      json: method === 'POST' ? { name: 'x' } : undefined,
    })
    const byToken = await callAs(gw.url, token, { method, path, json: method === 'POST' ? { name: 'x' } : undefined })
    checkProblem(t, byToken, byKey.status, byKey.json().code, `${method} ${path}`)
    t.equal(byToken.json().code, 'parent_key_required', 'a sub-account credential')
  }
})

t.test("a deactivated sub-account's token: 403 tenant_deactivated, as its key", async (t) => {
  const c = await clientKey(gw.url, parent)
  const token = await accessToken(gw.url, c)
  t.equal((await callAs(gw.url, token, { path: '/v1/orders/1' })).status, 200, 'before')
  const off = await callAs(gw.url, parent.apiKey, {
    method: 'POST',
    path: `/v1/sub-accounts/${c.subId}/deactivate`,
    acting: 'self',
  })
  t.equal(off.status, 200, 'deactivated')
  checkProblem(t, await callAs(gw.url, c.apiKey, { path: '/v1/orders/1' }), 403, 'tenant_deactivated', 'the key')
  checkProblem(t, await callAs(gw.url, token, { path: '/v1/orders/1' }), 403, 'tenant_deactivated', 'the token')
  checkProblem(t, await callAs(gw.url, token, { path: '/v1/sub-accounts' }), 403, 'tenant_deactivated', 'on management')
})

t.test("a revoked key's token: 401 at once, answered exactly as the key is", async (t) => {
  const c = await clientKey(gw.url, parent)
  const token = await accessToken(gw.url, c)
  t.equal((await callAs(gw.url, token, { path: '/v1/orders/1' })).status, 200, 'before')
  const revoke = await callAs(gw.url, parent.apiKey, {
    method: 'POST',
    path: `/v1/sub-accounts/${c.subId}/api-keys/${c.keyId}/revoke`,
    acting: 'self',
  })
  t.equal(revoke.status, 200, 'revoked')
  const after = await callAs(gw.url, token, { path: '/v1/orders/1' })
  const key = await callAs(gw.url, c.apiKey, { path: '/v1/orders/1' })
  checkProblem(t, after, 401, 'unauthenticated', 'the token')
  checkProblem(t, key, 401, 'unauthenticated', 'the key')
  t.equal(after.headers['www-authenticate'], 'Bearer', "the key's header")
  t.equal(after.headers['www-authenticate'], key.headers['www-authenticate'], 'the same header as the key')
  t.equal(after.json().detail, key.json().detail, 'the same detail as the key')
})

t.test("an expired key's token: refused as the key is (401 key_expired)", async (t) => {
  const c = await clientKey(gw.url, parent)
  // Set before the gateway has read the key anywhere, so that its cached record carries it.
  await gw.sql`update api_keys set expires_at = now() + interval '1500 milliseconds' where id = ${c.keyId}`
  const token = await accessToken(gw.url, c)
  t.equal((await callAs(gw.url, token, { path: '/v1/orders/1' })).status, 200, 'before its expiry')
  await sleep(1700)
  const after = await callAs(gw.url, token, { path: '/v1/orders/1' })
  checkProblem(t, after, 401, 'key_expired', 'after')
  t.match(String(after.headers['www-authenticate']), /^Bearer error="invalid_token"/)
})

t.test('hostile tokens: each 401 unauthenticated, none reaches the upstream', async (t) => {
  const real = await accessToken(gw.url, client)
  const [header, payload] = real.split('.') as [string, string, string]
  const claims = JSON.parse(Buffer.from(payload, 'base64url').toString()) as JWTPayload
  const jwk = (await (await fetch(`${gw.url}/.well-known/jwks.json`)).json()).keys[0]
  const publicPem = await exportSPKI((await importJWK(jwk, 'ES256')) as CryptoKey)
  const attacker = await generateKeyPair('ES256')
  const otherDeployment = await Keyring.ephemeral()
  const now = Math.floor(Date.now() / 1000)
  const hmac = (secret: string) =>
    new SignJWT(claims)
      .setProtectedHeader({ alg: 'HS256', typ: 'at+jwt', kid: jwk.kid })
      .sign(new TextEncoder().encode(secret))

  const hostile: [string, string][] = [
    ['alg none', new UnsecuredJWT(claims).encode()],
    [
      'alg none with the real header fields',
      `${Buffer.from(JSON.stringify({ alg: 'none', typ: 'at+jwt', kid: jwk.kid })).toString('base64url')}.${payload}.`,
    ],
    ['HS256 keyed with the public key as PEM', await hmac(publicPem)],
    ['HS256 keyed with the public JWK', await hmac(JSON.stringify(jwk))],
    [
      'the real kid, signed by another key',
      await new SignJWT(claims)
        .setProtectedHeader({ alg: 'ES256', typ: 'at+jwt', kid: jwk.kid })
        .sign(attacker.privateKey),
    ],
    [
      'an unknown kid',
      await new SignJWT(claims)
        .setProtectedHeader({ alg: 'ES256', typ: 'at+jwt', kid: 'nope' })
        .sign(attacker.privateKey),
    ],
    ['no kid', await new SignJWT(claims).setProtectedHeader({ alg: 'ES256', typ: 'at+jwt' }).sign(attacker.privateKey)],
    [
      'the kid of another deployment (its own keyring)',
      (await otherDeployment.sign(claims, { typ: 'at+jwt', ttlSeconds: 900 })).token,
    ],
    ['expired beyond the leeway', await signedHere({}, { now: now - 900 - 31 })],
    ['not yet valid (nbf)', await signedHere({ nbf: now + 120 })],
    ['issued in the future (iat)', await signedHere({}, { now: now + 120 })],
    ['a life longer than any token gets', await signedHere({}, { ttlSeconds: 7200 })],
    ['another audience', await signedHere({ aud: 'https://elsewhere.test' })],
    ['another issuer', await signedHere({ iss: 'https://elsewhere.test' })],
    ['typ JWT (an identity assertion), not at+jwt', await signedHere({}, { typ: 'JWT' })],
    ['another tenant_id than its key', await signedHere({ tenant_id: parent.id })],
    ['client_id other than sub', await signedHere({ client_id: parent.keyId })],
    [
      'sub of no key',
      await signedHere({
        sub: '00000000-0000-4000-8000-000000000000',
        client_id: '00000000-0000-4000-8000-000000000000',
      }),
    ],
    ['sub not a key id', await signedHere({ sub: 'admin', client_id: 'admin' })],
    ['no jti', await signedHere({ jti: undefined })],
    ['truncated', real.slice(0, -8)],
    ['without its signature', `${header}.${payload}.`],
    [
      'the signature of another token',
      `${header}.${payload}.${(await accessToken(gw.url, client, 'orders:read')).split('.')[2]}`,
    ],
    ['a payload that is not JSON', `${header}.${Buffer.from('nope').toString('base64url')}.${real.split('.')[2]}`],
  ]
  const hitsBefore = upstream.received.length
  for (const [what, token] of hostile) {
    for (const path of ['/v1/orders/1', '/v1/sub-accounts']) {
      const res = await callAs(gw.url, token, { path })
      checkProblem(t, res, 401, 'unauthenticated', `${what}, ${path}`)
      // One answer for every credential that does not authenticate, token or key (docs/api.md).
      t.equal(res.headers['www-authenticate'], 'Bearer', `${what}: as an unknown key`)
    }
  }

  // Checked before any parsing or cryptography: the signature checks do not move.
  const huge = `${header}.${payload}${'A'.repeat(9 * 1024)}.${real.split('.')[2]}`
  const [valid, invalid] = [await verifications('valid'), await verifications('invalid')]
  checkProblem(t, await callAs(gw.url, huge, { path: '/v1/orders/1' }), 401, 'unauthenticated', 'a huge token')
  t.equal((await verifications('valid')) + (await verifications('invalid')), valid + invalid, 'no signature checked')
  t.equal(upstream.received.length, hitsBefore, 'the upstream saw none of them')

  // The leeway: 30 s past exp still passes.
  const late = await signedHere({}, { now: now - 900 - 10 })
  t.equal((await callAs(gw.url, late, { path: '/v1/orders/1' })).status, 200, 'expired 10 s ago: within the leeway')
})

t.test('a remembered token costs no second signature check', async (t) => {
  const token = await accessToken(gw.url, client)
  const before = await verifications('valid')
  for (let i = 0; i < 5; i++) {
    t.equal((await callAs(gw.url, token, { path: '/v1/sub-accounts' })).status, 403, 'management')
    t.equal((await callAs(gw.url, token, { path: '/v1/orders/1' })).status, 200, 'proxied')
  }
  t.equal((await verifications('valid')) - before, 1, 'one signature check for ten uses')
  // Two proxied calls back to back: the second is within the first's second unless the machine
  // stalls between them (at load, CI), when the pair is tried again. Without the memory, none is.
  let remembered = 0
  for (let pairs = 0; pairs < 5 && remembered === 0; pairs++) {
    const admitted = await recentAdmissions(gw)
    for (let i = 0; i < 2; i++) t.equal((await callAs(gw.url, token, { path: '/v1/orders/1' })).status, 200)
    remembered = (await recentAdmissions(gw)) - admitted
  }
  t.ok(remembered >= 1, `and a proxied repeat is admitted from the last second's memory (${remembered})`)
})

t.test('a withdrawn signing key ends its remembered tokens at once', async (t) => {
  const keyring = gw.app.keyring
  const [current] = keyring.keys()
  // The current key, published for a moment more; a new one signs meanwhile.
  await keyring.replace([
    { ...current!, publishedUntil: Date.now() + 400 },
    await generateSigningKey(Date.now() - 5000),
  ])
  const token = await signedHere({}, {})
  // Signed by the new key; the old one signs through a keyring that holds only it.
  const old = new Keyring()
  await old.replace([current!])
  const byOldKey = (
    await old.sign(
      { ...(JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()) as JWTPayload), jti: 'old' },
      { typ: 'at+jwt', ttlSeconds: 900 },
    )
  ).token
  t.equal((await callAs(gw.url, byOldKey, { path: '/v1/orders/1' })).status, 200, 'accepted while published')
  t.equal((await callAs(gw.url, byOldKey, { path: '/v1/orders/1' })).status, 200, 'remembered')
  await sleep(500)
  const checks = await verifications('valid')
  checkProblem(t, await callAs(gw.url, byOldKey, { path: '/v1/orders/1' }), 401, 'unauthenticated', 'once withdrawn')
  checkProblem(
    t,
    await callAs(gw.url, byOldKey, { path: '/v1/sub-accounts' }),
    401,
    'unauthenticated',
    'on management too',
  )
  t.equal(await verifications('valid'), checks, 'refused from memory, not by a new check')
  const fresh = await callAs(gw.url, token, { path: '/v1/orders/1' })
  t.equal(fresh.status, 200, `the new key's tokens still work (${fresh.body.slice(0, 200)})`)
})

t.test('a token sent without Bearer, or beside a second Authorization, is refused', async (t: Test) => {
  const token = await accessToken(gw.url, client)
  const bare = await callAs(gw.url, null, { path: '/v1/orders/1', headers: [['Authorization', token]] })
  checkProblem(t, bare, 401, 'unauthenticated', 'without a scheme')
  const twice = await callAs(gw.url, token, { path: '/v1/orders/1', headers: [['Authorization', `Bearer ${token}`]] })
  checkProblem(t, twice, 401, 'unauthenticated', 'two Authorization headers')
})
