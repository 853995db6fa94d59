// The upstream of docs/credentials.md, run as the documentation shows it: `node
// docs/examples/verify-identity.mjs`, on a socket of its own, verifying the assertions of a live
// gateway through createRemoteJWKSet. What it answers is what it verified.
import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { SignJWT } from 'jose'
import t from 'tap'
import { generateSigningKey } from '../../src/signing-keys/keyring.js'
import { startGateway } from '../helpers/gateway.js'
import { callAs, type RawResponse } from '../helpers/http.js'
import { closedPort } from '../helpers/upstream.js'

const EXAMPLE = fileURLToPath(new URL('../../docs/examples/verify-identity.mjs', import.meta.url))
const ISSUER = 'https://api.example.test'
const AUDIENCE = 'https://shipments.internal'

const port = await closedPort()
const upstream = `http://127.0.0.1:${port}`
const gw = await startGateway(t, {
  env: { ISSUER_URL: ISSUER },
  gatewayConfig: {
    routes: [
      { prefix: '/v1/shipments', upstream, identity: { audience: AUDIENCE } },
      { prefix: '/v1/elsewhere', upstream, identity: { audience: 'https://someone-else.internal' } },
      { prefix: '/v1/unsigned', upstream },
    ],
  },
})

const child: ChildProcess = spawn(process.execPath, [EXAMPLE], {
  env: { ...process.env, GATEWAY_URL: gw.url, ISSUER, AUDIENCE, PORT: String(port) },
  stdio: ['ignore', 'pipe', 'pipe'],
})
t.teardown(async () => {
  if (child.exitCode === null) {
    child.kill()
    await once(child, 'exit')
  }
})
let output = ''
child.stderr!.on('data', (chunk: Buffer) => (output += chunk))
const [line] = (await once(child.stdout!, 'data')) as [Buffer]
// Setup, not an assertion: with an assertion at the top level, tap ended the root test (and ran
// its teardown) before the awaits below.
if (!line.toString().includes(`verifying identities for ${AUDIENCE} on port ${port}`))
  throw new Error(`the example did not start: ${line}`)

const parent = await gw.createParent()
const manage = async (path: string, json: unknown) =>
  (
    await callAs(gw.url, parent.apiKey, { method: 'POST', path: `/v1/sub-accounts${path}`, acting: 'self', json })
  ).json()
const sub = (await manage('', { name: 'Acme', external_id: 'acme' })) as { id: string }
const subKey = (await manage(`/${sub.id}/api-keys`, { name: 'k', scopes: ['tracking:read'] })) as {
  id: string
  api_key: string
}

function answer(res: RawResponse): Record<string, unknown> {
  if (res.status !== 200) throw new Error(`${res.status} ${res.body}\n${output}`)
  return res.json() as Record<string, unknown>
}

t.test('docs/credentials.md shows this very file', async (t) => {
  const doc = readFileSync(fileURLToPath(new URL('../../docs/credentials.md', import.meta.url)), 'utf8')
  const shown = /```js\n([\s\S]*?)```/.exec(doc)?.[1]
  t.equal(shown, readFileSync(EXAMPLE, 'utf8'), 'the code block is the example, byte for byte')
})

t.test('through the gateway: verified, with who acts for whom', async (t) => {
  const acting = answer(await callAs(gw.url, parent.apiKey, { path: '/v1/shipments/1', acting: sub.id }))
  t.match(acting, {
    tenant: sub.id,
    acting_parent: parent.id,
    key_id: parent.keyId,
    scopes: ['sub_accounts:read', 'sub_accounts:write'],
    claims: { iss: ISSUER, aud: AUDIENCE, sub: sub.id, caller_tenant: parent.id, act: { sub: parent.id } },
  })
  const own = answer(await callAs(gw.url, subKey.api_key, { path: '/v1/shipments/1', method: 'POST', json: {} }))
  t.match(own, { tenant: sub.id, acting_parent: null, key_id: subKey.id, scopes: ['tracking:read'] })
  t.notOk('act' in (own.claims as object), 'no act claim')
})

t.test('what it refuses', async (t) => {
  const refused = async (res: Promise<RawResponse>, what: string) => {
    const r = await res
    t.equal(r.status, 401, `${what}: 401`)
    t.equal(r.json().error, 'invalid_identity', what)
  }
  await refused(callAs(gw.url, subKey.api_key, { path: '/v1/elsewhere/1' }), 'an assertion for another audience')
  await refused(callAs(gw.url, subKey.api_key, { path: '/v1/unsigned/1' }), 'a route that signs nothing')

  // Straight to the upstream, past the gateway: not a JWT, tampered, expired, or another key's.
  const direct = (token: string) => callAs(upstream, null, { path: '/', headers: [['X-Service-Identity', token]] })
  await refused(direct('forged'), 'not a JWT')
  const now = Math.floor(Date.now() / 1000)
  const claims = { iss: ISSUER, aud: AUDIENCE, sub: sub.id, caller_tenant: sub.id, key_id: subKey.id, scope: '' }
  const sign = (at: number) => gw.app.keyring.sign({ ...claims, nbf: at }, { typ: 'JWT', ttlSeconds: 60, now: at })
  const genuine = (await sign(now)).token
  t.equal((await direct(genuine)).status, 200, "the gateway's own signature passes")
  const [head, , signature] = genuine.split('.')
  const body = Buffer.from(JSON.stringify({ ...claims, sub: parent.id, nbf: now, iat: now, exp: now + 60 }))
  await refused(direct(`${head}.${body.toString('base64url')}.${signature}`), 'a tampered sub')
  await refused(direct((await sign(now - 3_600)).token), 'expired')
  const stranger = await generateSigningKey(0)
  const foreign = await new SignJWT({ ...claims })
    .setProtectedHeader({ typ: 'JWT', alg: 'ES256', kid: stranger.kid })
    .setIssuedAt(now)
    .setNotBefore(now)
    .setExpirationTime(now + 60)
    .sign(stranger.privateKey!)
  await refused(direct(foreign), 'signed by a key the gateway does not publish')
})
