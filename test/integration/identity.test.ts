// Signed identity for upstreams (docs/credentials.md): on a route with `identity` the upstream
// also receives X-Service-Identity, an ES256 JWT of the gateway's. Checked as an upstream would:
// with `jose` against the gateway's JWKS over HTTP, never with the gateway's own code. Then the
// cache of assertions: reused while warm, signed again at 90 % of their life, dropped with their
// key, their tenant, the tenancy cache's trust and the signing keys.
import { createRemoteJWKSet, decodeProtectedHeader, type JWTPayload, jwtVerify } from 'jose'
import t, { type Test } from 'tap'
import { cacheKeys } from '../../src/cache/index.js'
import {
  generateSigningKey,
  Keyring,
  type Signed,
  type SigningKey,
  type SignOptions,
} from '../../src/signing-keys/keyring.js'
import { metricValue, startGateway, type TestGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { eventually, sleep } from '../helpers/poll.js'
import { type ReceivedRequest, startUpstream } from '../helpers/upstream.js'

const ISSUER = 'https://gateway.test'
const SIGNED = 'https://shipments.internal'
const SHORT = 'https://short.internal'
const OTHER = 'https://other.internal'
const PARENT_SCOPES = 'sub_accounts:read sub_accounts:write'
const CLAIMS = ['iss', 'aud', 'sub', 'caller_tenant', 'key_id', 'scope', 'iat', 'nbf', 'exp']

/** The gateway's keyring, whose signings a test can hold back to have requests meet one in flight. */
class GatedKeyring extends Keyring {
  calls = 0
  /** Asked which key signs now: what a proxied request on a route with `identity` does first. */
  asked = 0
  gate: Promise<void> | null = null
  override signingKey(nowMs?: number): SigningKey {
    this.asked++
    return super.signingKey(nowMs)
  }
  override async sign(claims: JWTPayload, options: SignOptions): Promise<Signed> {
    this.calls++
    if (this.gate !== null) await this.gate
    return super.sign(claims, options)
  }
}
const keyring = new GatedKeyring()
await keyring.replace([await generateSigningKey(0)])

const upstream = await startUpstream(t)
const routes = [
  { prefix: '/v1/signed', upstream: upstream.url, identity: { audience: SIGNED } },
  { prefix: '/v1/short', upstream: upstream.url, identity: { audience: SHORT, ttl_seconds: 10 } },
  { prefix: '/v1/other', upstream: upstream.url, identity: { audience: OTHER, ttl_seconds: 300 } },
  { prefix: '/v1/plain', upstream: upstream.url },
]
// No second invalidation a second after each change (cache/invalidation.ts): it would drop the
// assertions of a key or tenant just made once more, and the renewal below would start over.
const cacheTimings = { reinvalidateAfterMs: 600_000 }
const gw = await startGateway(t, { gatewayConfig: { routes }, env: { ISSUER_URL: ISSUER }, cacheTimings, keyring })
// An upstream's verifier: the JWKS fetched over HTTP, again whenever a token names an unknown key.
const jwks = createRemoteJWKSet(new URL(`${gw.url}/.well-known/jwks.json`), { cooldownDuration: 0 })

async function verify(token: string, audience = SIGNED): Promise<{ kid: string; payload: JWTPayload }> {
  const { payload, protectedHeader } = await jwtVerify(token, jwks, {
    issuer: ISSUER,
    audience,
    typ: 'JWT',
    algorithms: ['ES256'],
  })
  return { kid: protectedHeader.kid!, payload }
}

const signatures = (on: TestGateway = gw) => metricValue(on.app, 'tgw_signatures_total', { purpose: 'identity' })
const held = (on: TestGateway = gw) => metricValue(on.app, 'tgw_identity_assertions_cached')

type Call = { path?: string; acting?: string; method?: string; headers?: [string, string][] }

/** What the upstream received for a request that must be forwarded. */
async function forwarded(apiKey: string, call: Call = {}, on: TestGateway = gw): Promise<ReceivedRequest> {
  const res = await callAs(on.url, apiKey, { path: '/v1/signed/x', ...call })
  if (res.status !== 200) throw new Error(`${call.path ?? '/v1/signed/x'}: ${res.status} ${res.body}`)
  return res.json() as unknown as ReceivedRequest
}

/** The X-Service-Identity the upstream got: exactly one. */
function assertionOf(received: ReceivedRequest): string {
  const values = received.rawHeaders.filter(
    (_, i) => i % 2 === 1 && /^x-service-identity$/i.test(received.rawHeaders[i - 1]!),
  )
  if (values.length !== 1) throw new Error(`the upstream got ${values.length} X-Service-Identity headers`)
  return values[0]!
}

const tokenOf = async (apiKey: string, call: Call = {}, on: TestGateway = gw) =>
  assertionOf(await forwarded(apiKey, call, on))

async function manage(apiKey: string, method: string, path: string, json?: unknown, on: TestGateway = gw) {
  const res = await callAs(on.url, apiKey, {
    method,
    path: `/v1/sub-accounts${path}`,
    acting: 'self',
    ...(json === undefined ? { headers: [['Content-Length', '0']] } : { json }),
  })
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${res.body}`)
  return res.json() as Record<string, string>
}

/** A parent, a sub-account of it, and a key of the sub-account with two scopes. */
async function tenants(name: string, on: TestGateway = gw) {
  const parent = await on.createParent({ name })
  const sub = await manage(parent.apiKey, 'POST', '', { name: `${name} sub`, external_id: `${name}-sub` }, on)
  const subKey = await manage(
    parent.apiKey,
    'POST',
    `/${sub.id}/api-keys`,
    { name: 'k', scopes: ['tracking:read', 'tracking:write'] },
    on,
  )
  return { parent, subId: sub.id!, subKey: { id: subKey.id!, apiKey: subKey.api_key! } }
}

t.test('the assertion: header, claims, acting or not (docs/credentials.md)', async (t) => {
  const { parent, subId, subKey } = await tenants('claims')
  const { keys } = (await (await fetch(`${gw.url}/.well-known/jwks.json`)).json()) as { keys: { kid: string }[] }

  async function check(t: Test, apiKey: string, call: Call, expected: Record<string, unknown>, acting: string | null) {
    const before = Math.floor(Date.now() / 1000)
    const received = await forwarded(apiKey, call)
    const after = Math.ceil(Date.now() / 1000)
    const token = assertionOf(received)
    const header = decodeProtectedHeader(token)
    t.same(header, { typ: 'JWT', alg: 'ES256', kid: header.kid }, 'header: typ JWT, alg ES256, kid, nothing else')
    t.ok(
      keys.some((key) => key.kid === header.kid),
      'kid names a key of the JWKS',
    )
    const { payload } = await verify(token)
    t.same(Object.keys(payload).sort(), [...CLAIMS, ...(acting === null ? [] : ['act'])].sort(), 'exactly these claims')
    t.match(payload, { iss: ISSUER, aud: SIGNED, ...expected })
    if (acting === null) t.notOk('act' in payload, 'no act claim when nobody acts for another')
    else t.same(payload.act, { sub: acting }, 'act: the parent acting for the sub-account (RFC 8693 §4.1)')
    t.equal(payload.nbf, payload.iat, 'nbf is iat')
    t.equal(payload.exp! - payload.iat!, 60, 'exp: ttl_seconds (default 60) after iat')
    t.ok(payload.iat! >= before && payload.iat! <= after, 'iat: when it was signed')
    // The plain headers say the same.
    t.equal(received.headers['x-service-resolved-tenant'], payload.sub)
    t.equal(received.headers['x-service-caller-tenant'], payload.caller_tenant)
    t.equal(received.headers['x-service-key-id'], payload.key_id)
    t.equal(received.headers['x-service-scopes'], payload.scope)
  }

  await t.test('a parent acting as its sub-account', async (t) => {
    const expected = { sub: subId, caller_tenant: parent.id, key_id: parent.keyId, scope: PARENT_SCOPES }
    await check(t, parent.apiKey, { acting: subId }, expected, parent.id)
  })
  await t.test('by external id, on a write', async (t) => {
    const other = await tenants('claims-write')
    const expected = { sub: other.subId, caller_tenant: other.parent.id, key_id: other.parent.keyId }
    await check(t, other.parent.apiKey, { acting: 'ext:claims-write-sub', method: 'POST' }, expected, other.parent.id)
  })
  await t.test('a parent as itself', async (t) => {
    const expected = { sub: parent.id, caller_tenant: parent.id, key_id: parent.keyId, scope: PARENT_SCOPES }
    await check(t, parent.apiKey, { acting: 'self' }, expected, null)
  })
  await t.test("a sub-account's own key", async (t) => {
    const expected = { sub: subId, caller_tenant: subId, key_id: subKey.id, scope: 'tracking:read tracking:write' }
    await check(t, subKey.apiKey, {}, expected, null)
  })
  await t.test('ttl_seconds and audience are the route’s', async (t) => {
    for (const [path, audience, ttl] of [
      ['/v1/short/x', SHORT, 10],
      ['/v1/other/x', OTHER, 300],
    ] as const) {
      const { payload } = await verify(await tokenOf(subKey.apiKey, { path }), audience)
      t.equal(payload.exp! - payload.iat!, ttl, `${path}: exp is iat + ${ttl}`)
      t.equal(payload.aud, audience, `${path}: aud`)
      await t.rejects(verify(await tokenOf(subKey.apiKey, { path }), SIGNED), `${path}: not valid for another audience`)
    }
  })
})

t.test('no signing key loaded: 503 store_unavailable, nothing forwarded (docs/api.md)', async (t) => {
  const empty = await startGateway(t, {
    gatewayConfig: { routes },
    env: { ISSUER_URL: ISSUER },
    keyring: new Keyring(),
  })
  const parent = await empty.createParent({ name: 'unsigned' })
  const before = upstream.received.length
  const res = await callAs(empty.url, parent.apiKey, { path: '/v1/signed/x', acting: 'self' })
  t.equal(res.status, 503, res.body)
  t.equal(res.json().code, 'store_unavailable')
  t.equal(
    (await callAs(empty.url, parent.apiKey, { path: '/v1/plain/x', acting: 'self' })).status,
    200,
    'a plain route',
  )
  t.equal(upstream.received.length, before + 1, 'only the plain route reached the upstream')
})

t.test('a route without the option sends no X-Service-Identity', async (t) => {
  const { parent, subId } = await tenants('plain')
  const received = await forwarded(parent.apiKey, { path: '/v1/plain/x', acting: subId })
  t.equal(received.headers['x-service-resolved-tenant'], subId, 'the plain headers are there')
  t.notOk('x-service-identity' in received.headers, 'no assertion')
})

t.test("a client's own X-Service-Identity never reaches the upstream", async (t) => {
  const { parent, subId } = await tenants('forged')
  const forged: [string, string][] = [
    ['X-Service-Identity', 'forged.one.a'],
    ['x-service-identity', 'forged.two.b'],
    ['X-SERVICE-IDENTITY', 'forged.three.c'],
    ['X_Service_Identity', 'forged.four.d'],
    ['x.service.identity', 'forged.five.e'],
  ]
  const lookalikes = (received: ReceivedRequest) =>
    received.rawHeaders.filter((name, i) => i % 2 === 0 && /^x[-_.]service[-_.]identity$/i.test(name))
  for (const headers of [forged, forged.slice(0, 1), [...forged, ['Connection', 'keep-alive, X-Service-Identity']]] as [
    string,
    string,
  ][][]) {
    const signed = await forwarded(parent.apiKey, { acting: subId, headers })
    t.same(lookalikes(signed), ['x-service-identity'], `signed route, ${headers.length} sent: the gateway's only`)
    const token = assertionOf(signed)
    t.notOk(token.startsWith('forged'), 'not a client value')
    t.equal((await verify(token)).payload.sub, subId, "it is the gateway's, for the resolved tenant")
    const plain = await forwarded(parent.apiKey, { path: '/v1/plain/x', acting: subId, headers })
    t.same(lookalikes(plain), [], `plain route, ${headers.length} sent: none`)
  }
})

t.test('warm requests reuse the assertion', async (t) => {
  const { parent, subId, subKey } = await tenants('reuse')
  const first = await tokenOf(parent.apiKey, { acting: subId })
  const signed = await signatures()
  for (let i = 0; i < 5; i++)
    t.equal(await tokenOf(parent.apiKey, { acting: subId }), first, `request ${i + 2}: the same`)
  t.equal(await tokenOf(parent.apiKey, { acting: subId, method: 'POST' }), first, 'a write too')
  t.equal(await signatures(), signed, 'no signature made')

  t.not(await tokenOf(parent.apiKey, { acting: 'self' }), first, 'another resolved tenant: another')
  t.not(await tokenOf(subKey.apiKey), first, 'another key: another')
  t.equal(await signatures(), signed + 2, 'one signature each')
})

t.test('requests that come while an assertion is being signed wait for that one signing', async (t) => {
  const { subKey } = await tenants('concurrent')
  let release = () => {}
  keyring.gate = new Promise<void>((resolve) => (release = resolve))
  t.teardown(release)
  const calls = keyring.calls
  const first = tokenOf(subKey.apiKey, { path: '/v1/other/x' })
  t.not(await eventually(5_000, async () => keyring.calls > calls), null, 'the first request is being signed for')
  // Each request asks the keyring which key signs, then finds its entry: counted, it is waiting.
  const asked = keyring.asked
  const others = Array.from({ length: 19 }, () => tokenOf(subKey.apiKey, { path: '/v1/other/x' }))
  t.not(await eventually(5_000, async () => keyring.asked - asked === 19), null, '19 more are waiting')
  keyring.gate = null
  release()
  const tokens = await Promise.all([first, ...others])
  t.equal(new Set(tokens).size, 1, '20 requests of a new entry: one assertion')
  t.equal(keyring.calls - calls, 1, 'one signing')
})

t.test('signed again once less than 10 % of its life is left (ttl_seconds 10)', async (t) => {
  const { subKey } = await tenants('renew')
  const seen: { sentAt: number; token: string }[] = []
  const signed = await signatures()
  const renewed = await eventually(
    20_000,
    async () => {
      const sentAt = Date.now()
      seen.push({ sentAt, token: await tokenOf(subKey.apiKey, { path: '/v1/short/x' }) })
      return new Set(seen.map((s) => s.token)).size > 1
    },
    250,
  )
  t.not(renewed, null, 'a new assertion came')
  const [first, second] = [...new Set(seen.map((s) => s.token))] as [string, string]
  const [a, b] = [(await verify(first, SHORT)).payload, (await verify(second, SHORT)).payload]
  t.ok(seen.filter((s) => s.token === first).length > 1, 'the first was sent more than once')
  t.ok(b.iat! - a.iat! >= 9, `the second was signed once 90 % of the first's life had passed (${b.iat! - a.iat!} s)`)
  const renewAt = (a.iat! + 9) * 1000
  t.ok(
    seen.every((s) => s.token !== first || s.sentAt < renewAt),
    'no request sent after 90 % of its life got the first',
  )
  t.equal(await signatures(), signed + 2, 'two signatures: the first and its renewal')
})

t.test('dropped when the key or the tenant changes', async (t) => {
  const { parent, subId, subKey } = await tenants('changes')
  const parentToken = await tokenOf(parent.apiKey, { acting: subId })
  const subToken = await tokenOf(subKey.apiKey)
  const entries = await held()

  await t.test('the key revoked', async (t) => {
    const other = await manage(parent.apiKey, 'POST', `/${subId}/api-keys`, { name: 'doomed', scopes: ['a:b'] })
    await tokenOf(other.api_key!)
    t.equal(await held(), entries + 1, 'its assertion is held')
    await manage(parent.apiKey, 'POST', `/${subId}/api-keys/${other.id}/revoke`)
    t.equal(await held(), entries, 'and dropped with the key')
    t.equal(await tokenOf(subKey.apiKey), subToken, "another key's stays")
    t.equal(await tokenOf(parent.apiKey, { acting: subId }), parentToken, "the parent's too")
  })

  await t.test("the key's record changed (a roll's new expiry)", async (t) => {
    await gw.app.tenancyCache.invalidate([cacheKeys.keyById(subKey.id)])
    const signed = await signatures()
    const token = await tokenOf(subKey.apiKey)
    t.not(token, subToken, 'a new assertion')
    t.equal(await signatures(), signed + 1, 'signed anew')
    t.equal(await tokenOf(parent.apiKey, { acting: subId }), parentToken, "another key's stays")
  })

  await t.test('the sub-account updated (external id)', async (t) => {
    const before = [await tokenOf(subKey.apiKey), await tokenOf(parent.apiKey, { acting: subId })]
    const self = await tokenOf(parent.apiKey, { acting: 'self' })
    await manage(parent.apiKey, 'PATCH', `/${subId}`, { external_id: 'changes-renamed' })
    const after = [await tokenOf(subKey.apiKey), await tokenOf(parent.apiKey, { acting: subId })]
    t.not(after[0], before[0], "the sub-account key's: new")
    t.not(after[1], before[1], "the parent's acting as it: new")
    t.equal(await tokenOf(parent.apiKey, { acting: 'self' }), self, "the parent's as itself stays")
  })

  await t.test('the sub-account deactivated and reactivated', async (t) => {
    const before = await tokenOf(parent.apiKey, { acting: subId })
    await manage(parent.apiKey, 'POST', `/${subId}/deactivate`)
    t.equal((await callAs(gw.url, parent.apiKey, { path: '/v1/signed/x', acting: subId })).status, 403, 'refused')
    await manage(parent.apiKey, 'POST', `/${subId}/reactivate`)
    const after = await tokenOf(parent.apiKey, { acting: subId })
    t.not(after, before, 'a new assertion once it is back')
    t.equal((await verify(after)).payload.sub, subId)
  })

  await t.test('the tenancy cache stops trusting what it holds', async (t) => {
    const before = await tokenOf(subKey.apiKey)
    t.ok((await held()) > 0)
    gw.app.tenancyCache.clearLocal()
    t.equal(await held(), 0, 'every assertion dropped')
    t.not(await tokenOf(subKey.apiKey), before, 'a new one')
  })
})

t.test("another replica's change reaches its assertions over the bus", async (t) => {
  const replica = await startGateway(t, {
    database: gw.database,
    redisKeyPrefix: gw.redisKeyPrefix,
    gatewayConfig: { routes },
    env: { ISSUER_URL: ISSUER },
    keyring: gw.app.keyring,
    cacheTimings,
  })
  const { parent, subId } = await tenants('bus')
  const before = await tokenOf(parent.apiKey, { acting: subId }, replica)
  t.equal(await tokenOf(parent.apiKey, { acting: subId }, replica), before, 'reused on the replica')
  const entries = await held(replica)
  await manage(parent.apiKey, 'PATCH', `/${subId}`, { external_id: 'bus-renamed' })
  t.not(await eventually(5_000, async () => (await held(replica)) < entries), null, 'dropped on the replica')
  t.not(await tokenOf(parent.apiKey, { acting: subId }, replica), before, 'a new assertion there')
})

t.test('a new signing key: assertions signed by the old one are not sent again', async (t) => {
  const { parent, subId } = await tenants('rotation')
  const old = await tokenOf(parent.apiKey, { acting: subId })
  const oldKid = (await verify(old)).kid
  const oldKey = gw.app.keyring.keys().find((key) => key.kid === oldKid)!

  await t.test('replace: a new key signs from now', async (t) => {
    const fresh = await generateSigningKey(Date.now())
    await gw.app.keyring.replace([oldKey, fresh])
    t.equal(await held(), 0, 'every assertion dropped')
    const token = await tokenOf(parent.apiKey, { acting: subId })
    t.not(token, old, 'a new assertion')
    t.equal((await verify(token)).kid, fresh.kid, 'signed by the new key')
    t.equal(await tokenOf(parent.apiKey, { acting: subId }), token, 'then reused')
  })

  await t.test('a published next key starts to sign', async (t) => {
    const current = gw.app.keyring.signingKey()
    const next = await generateSigningKey(Date.now() + 1_500)
    await gw.app.keyring.replace([current, next])
    const early = await tokenOf(parent.apiKey, { acting: subId })
    t.equal((await verify(early)).kid, current.kid, 'before its time: the current key')
    await sleep(Math.max(0, next.activatesAt - Date.now()) + 50)
    const late = await tokenOf(parent.apiKey, { acting: subId })
    t.not(late, early, 'once it signs: a new assertion, though the old one has most of its life left')
    t.equal((await verify(late)).kid, next.kid, 'signed by it')
  })

  await t.test('replace with a new key only (the old one withdrawn)', async (t) => {
    const before = await tokenOf(parent.apiKey, { acting: subId })
    const only = await generateSigningKey(0)
    await gw.app.keyring.replace([only])
    const token = await tokenOf(parent.apiKey, { acting: subId })
    t.not(token, before)
    t.equal((await verify(token)).kid, only.kid)
    await t.rejects(verify(before), 'the old assertion no longer verifies')
  })
})
