// POST /oauth2/token and the authorization server metadata (docs/credentials.md), over real
// sockets, against real Postgres and Redis. Tokens are checked as a client would check them: with
// jose against the gateway's published JWKS, never with the gateway's own code.
import { createRemoteJWKSet, decodeProtectedHeader, jwtVerify } from 'jose'
import t, { type Test } from 'tap'
import { metricValue, startGateway } from '../helpers/gateway.js'
import { rawExchange } from '../helpers/hostile.js'
import { type RawResponse, rawRequest } from '../helpers/http.js'
import { basicAuthorization, type ClientKey, clientKey, formEncode, tokenRequest } from '../helpers/tokens.js'
import { sleep } from '../helpers/poll.js'
import { startUpstream } from '../helpers/upstream.js'

const ISSUER = 'https://gateway.test'
const TTL = 600
const upstream = await startUpstream(t)
// A catch-all route: none of the paths below may reach it.
const gw = await startGateway(t, {
  upstreamUrl: upstream.url,
  env: { ISSUER_URL: ISSUER, ACCESS_TOKEN_TTL_SECONDS: String(TTL) },
})
const parent = await gw.createParent()
const client = await clientKey(gw.url, parent)
const jwks = createRemoteJWKSet(new URL(`${gw.url}/.well-known/jwks.json`))

const grant = { grant_type: 'client_credentials' }
const post = (c: ClientKey, extra: Record<string, string> = {}) => ({
  ...grant,
  client_id: c.keyId,
  client_secret: c.clientSecret,
  ...extra,
})
/** Percent-encodes every character, as a client may: the gateway must decode before comparing. */
const encodeAll = (value: string) => [...Buffer.from(value)].map((b) => `%${b.toString(16).padStart(2, '0')}`).join('')

function noStore(t: Test, res: RawResponse): void {
  t.equal(res.headers['cache-control'], 'no-store', 'Cache-Control: no-store')
  t.equal(res.headers.pragma, 'no-cache', 'Pragma: no-cache')
  t.match(String(res.headers['x-request-id']), /\S/, 'a request id')
}

/** An RFC 6749 §5.2 error: the status, its JSON (not problem+json), and no-store. */
function oauthError(t: Test, res: RawResponse, status: number, error: string, what: string): void {
  t.equal(res.status, status, `${what}: ${status} (${res.body.slice(0, 200)})`)
  t.match(String(res.headers['content-type']), /^application\/json/, `${what}: application/json, not problem+json`)
  const body = res.json()
  t.same(Object.keys(body).sort(), ['error', 'error_description'], `${what}: error and error_description only`)
  t.equal(body.error, error, `${what}: ${error}`)
  // RFC 6749 §5.2: error_description is printable ASCII without '"' and '\\'.
  t.match(
    body.error_description,
    /^[\x20-\x21\x23-\x5b\x5d-\x7e]+$/,
    `${what}: error_description in RFC 6749's characters`,
  )
  noStore(t, res)
  if (status === 401)
    t.equal(res.headers['www-authenticate'], 'Basic realm="tenancy-gateway"', `${what}: WWW-Authenticate Basic`)
}

/** A token answer, its token checked with jose against the JWKS as any client would. */
async function issued(t: Test, res: RawResponse, c: ClientKey, scope: string) {
  t.equal(res.status, 200, `200 (${res.body.slice(0, 300)})`)
  t.match(String(res.headers['content-type']), /^application\/json/)
  noStore(t, res)
  const body = res.json()
  t.same(Object.keys(body).sort(), ['access_token', 'expires_in', 'scope', 'token_type'])
  t.match(body, { token_type: 'Bearer', expires_in: TTL, scope })
  const { payload, protectedHeader } = await jwtVerify(body.access_token, jwks, {
    issuer: ISSUER,
    audience: ISSUER,
    typ: 'at+jwt',
    algorithms: ['ES256'],
  })
  t.match(protectedHeader, { typ: 'at+jwt', alg: 'ES256', kid: /\S/ })
  t.match(payload, {
    iss: ISSUER,
    aud: ISSUER,
    sub: c.keyId,
    client_id: c.keyId,
    tenant_id: c.subId,
    parent_id: c.parentId,
    scope,
    jti: /\S/,
  })
  t.equal(payload.exp! - payload.iat!, TTL, 'exp is iat + ACCESS_TOKEN_TTL_SECONDS')
  t.ok(Math.abs(payload.iat! - Date.now() / 1000) < 60, 'iat is now')
  return { token: body.access_token as string, payload }
}

t.test('client_secret_basic, both parts form-urlencoded before base64 (RFC 6749 §2.3.1)', async (t) => {
  const signedBefore = await metricValue(gw.app, 'tgw_signatures_total', { purpose: 'access_token' })
  const plain = await tokenRequest(gw.url, {
    form: grant,
    headers: [['Authorization', basicAuthorization(client.keyId, client.clientSecret)]],
  })
  const first = await issued(t, plain, client, 'orders:read orders:write')
  // Every character escaped: a server that compared the raw parts would refuse this.
  const escaped = await tokenRequest(gw.url, {
    form: grant,
    headers: [['Authorization', basicAuthorization(client.keyId, client.clientSecret, encodeAll)]],
  })
  const second = await issued(t, escaped, client, 'orders:read orders:write')
  t.not(first.payload.jti, second.payload.jti, 'each token has its own jti')
  const lower = await tokenRequest(gw.url, {
    form: grant,
    headers: [['authorization', basicAuthorization(client.keyId, client.clientSecret).replace('Basic', 'basic')]],
  })
  t.equal(lower.status, 200, 'the scheme name in any case')
  // A form client_id equal to the Basic one is no second authentication.
  const repeated = await tokenRequest(gw.url, {
    form: { ...grant, client_id: client.keyId },
    headers: [['Authorization', basicAuthorization(client.keyId, client.clientSecret)]],
  })
  t.equal(repeated.status, 200, 'with the same client_id in the form too')
  t.equal(
    (await metricValue(gw.app, 'tgw_signatures_total', { purpose: 'access_token' })) - signedBefore,
    4,
    'one signature per token',
  )
})

t.test('client_secret_post', async (t) => {
  await issued(t, await tokenRequest(gw.url, { form: post(client) }), client, 'orders:read orders:write')
  const escapedBody = `grant_type=client%5Fcredentials&client_id=${encodeAll(client.keyId)}&client_secret=${encodeAll(client.clientSecret)}`
  await issued(t, await tokenRequest(gw.url, { form: escapedBody }), client, 'orders:read orders:write')
  const unknownIgnored = await tokenRequest(gw.url, { form: post(client, { audience: 'x', resource: 'y' }) })
  t.equal(unknownIgnored.status, 200, 'unknown parameters are ignored (RFC 6749 §3.2)')
})

t.test('scope: a subset of the key, all of it by default, nothing beyond', async (t) => {
  const wide = await clientKey(gw.url, parent, ['tracking:*', 'orders:read'])
  const ask = (scope: string) => tokenRequest(gw.url, { form: post(wide, { scope }) })
  await issued(t, await ask('orders:read'), wide, 'orders:read')
  await issued(t, await ask('tracking:read orders:read'), wide, 'tracking:read orders:read')
  await issued(t, await ask('orders:read orders:read'), wide, 'orders:read')
  await issued(t, await ask(''), wide, 'tracking:* orders:read')
  await issued(t, await tokenRequest(gw.url, { form: post(wide) }), wide, 'tracking:* orders:read')
  oauthError(t, await ask('orders:write'), 400, 'invalid_scope', 'a scope the key lacks')
  oauthError(t, await ask('orders:read billing:read'), 400, 'invalid_scope', 'one of two beyond the key')
  oauthError(t, await ask('orders:read  tracking:read'), 400, 'invalid_scope', 'two spaces')
  oauthError(t, await ask(' orders:read'), 400, 'invalid_scope', 'a leading space')
  oauthError(t, await ask('orders:"read"'), 400, 'invalid_scope', 'a character RFC 6749 §3.3 excludes')
  // Covered by the key's tracking:*, but no scope name: X-Service-Scopes would carry it as it is.
  oauthError(t, await ask('tracking:READ,x'), 400, 'invalid_scope', 'not a scope name, though a wildcard covers it')
  oauthError(t, await ask('tracking:a/b'), 400, 'invalid_scope', 'a slash')
})

t.test('grant_type', async (t) => {
  const auth: [string, string][] = [['Authorization', basicAuthorization(client.keyId, client.clientSecret)]]
  oauthError(t, await tokenRequest(gw.url, { form: {}, headers: auth }), 400, 'invalid_request', 'missing')
  oauthError(t, await tokenRequest(gw.url, { form: 'grant_type=', headers: auth }), 400, 'invalid_request', 'empty')
  for (const other of ['password', 'authorization_code', 'refresh_token', 'CLIENT_CREDENTIALS', 'é"\\\n'])
    oauthError(
      t,
      await tokenRequest(gw.url, { form: { grant_type: other }, headers: auth }),
      400,
      'unsupported_grant_type',
      other,
    )
})

t.test('bodies that are not a plain UTF-8 form: 400 invalid_request', async (t) => {
  const body = new URLSearchParams(post(client)).toString()
  for (const charset of ['charset=utf-8', 'charset="UTF-8"', 'CHARSET=us-ascii']) {
    const res = await tokenRequest(gw.url, { form: body, contentType: `application/x-www-form-urlencoded; ${charset}` })
    t.equal(res.status, 200, `${charset}: accepted (${res.body.slice(0, 120)})`)
  }
  const cases: [string, Parameters<typeof tokenRequest>[1]][] = [
    ['charset=iso-8859-1', { form: body, contentType: 'application/x-www-form-urlencoded; charset=iso-8859-1' }],
    ['a charset with a backslash', { form: body, contentType: 'application/x-www-form-urlencoded; charset=\\x' }],
    ['a type with a quote and a backslash', { form: body, contentType: 'text/"plain\\' }],
    ['a parameter named with a quote sent twice', { form: `${body}&%22%5C%C3%A9=1&%22%5C%C3%A9=2` }],
    ['grant_type twice', { form: `${body}&grant_type=client_credentials` }],
    ['client_secret twice', { form: `${body}&client_secret=${client.clientSecret}` }],
    ['scope twice', { form: `${body}&scope=orders:read&scope=orders:read` }],
    ['an unknown parameter twice', { form: `${body}&x=1&x=2` }],
    ['a broken percent-encoding', { form: `${body}&scope=orders%zzread` }],
    ['a lone %', { form: `${body}&scope=100%` }],
    ['escapes that are not UTF-8', { form: `${body}&scope=%C3%28` }],
    [
      'raw bytes that are not UTF-8',
      { form: Buffer.concat([Buffer.from(`${body}&scope=`), Buffer.from([0xff, 0xfe])]) },
    ],
    ['an empty body', { form: '' }],
    ['no body and no type', { contentType: null }],
    ['JSON', { form: JSON.stringify(post(client)), contentType: 'application/json' }],
    ['text/plain', { form: body, contentType: 'text/plain' }],
    ['multipart', { form: body, contentType: 'multipart/form-data; boundary=x' }],
    ['a form without a type', { form: body, contentType: null }],
    ['a body over 4 KiB', { form: `${body}&padding=${'a'.repeat(5000)}` }],
    [
      'parameters in the URL',
      { form: grant, path: `/oauth2/token?client_id=${client.keyId}&client_secret=${client.clientSecret}` },
    ],
  ]
  for (const [what, request] of cases) oauthError(t, await tokenRequest(gw.url, request), 400, 'invalid_request', what)
})

t.test('client authentication refused: 401 invalid_client, one answer for every reason', async (t) => {
  const revoked = await clientKey(gw.url, parent)
  const revoke = await rawRequest(gw.url, {
    method: 'POST',
    path: `/v1/sub-accounts/${revoked.subId}/api-keys/${revoked.keyId}/revoke`,
    headers: [
      ['Authorization', `Bearer ${parent.apiKey}`],
      ['X-Service-Acting-Tenant', 'self'],
    ],
  })
  t.equal(revoke.status, 200, 'a key revoked')
  const expired = await clientKey(gw.url, parent)
  await gw.sql`update api_keys set expires_at = now() - interval '1 second' where id = ${expired.keyId}`
  const deactivated = await clientKey(gw.url, parent)
  const deactivate = await rawRequest(gw.url, {
    method: 'POST',
    path: `/v1/sub-accounts/${deactivated.subId}/deactivate`,
    headers: [
      ['Authorization', `Bearer ${parent.apiKey}`],
      ['X-Service-Acting-Tenant', 'self'],
    ],
  })
  t.equal(deactivate.status, 200, 'a sub-account deactivated')
  const otherSecret = (await clientKey(gw.url, parent)).clientSecret

  const refusals: [string, Record<string, string>][] = [
    ['an unknown key', post({ ...client, keyId: '00000000-0000-4000-8000-000000000000' })],
    ['a client_id that is not a key id', post({ ...client, keyId: 'someone' })],
    ['a wrong secret', post({ ...client, clientSecret: otherSecret })],
    ['a secret that is not a secret', post({ ...client, clientSecret: 'hunter2' })],
    ['the key itself as the secret', post({ ...client, clientSecret: client.apiKey })],
    ['a revoked key', post(revoked)],
    ['an expired key', post(expired)],
    ['a deactivated sub-account', post(deactivated)],
    ['a parent key, which has no secret', post({ ...client, keyId: parent.keyId })],
    ['client_id without a secret', { ...grant, client_id: client.keyId }],
  ]
  const bodies = new Set<string>()
  for (const [what, form] of refusals) {
    const res = await tokenRequest(gw.url, { form })
    oauthError(t, res, 401, 'invalid_client', what)
    bodies.add(res.body)
    const basic = await tokenRequest(gw.url, {
      form: grant,
      headers: [['Authorization', basicAuthorization(form.client_id!, form.client_secret ?? '')]],
    })
    oauthError(t, basic, 401, 'invalid_client', `${what}, by Basic`)
    bodies.add(basic.body)
  }
  t.equal(bodies.size, 1, `the same body for every reason: ${[...bodies].join(' | ')}`)

  oauthError(t, await tokenRequest(gw.url, { form: grant }), 401, 'invalid_client', 'no client authentication')
  oauthError(
    t,
    await tokenRequest(gw.url, { form: grant, headers: [['Authorization', `Bearer ${client.apiKey}`]] }),
    401,
    'invalid_client',
    'a Bearer key instead of Basic',
  )
})

t.test('client authentication malformed or twofold: 400 invalid_request', async (t) => {
  const basic = basicAuthorization(client.keyId, client.clientSecret)
  const cases: [string, Parameters<typeof tokenRequest>[1]][] = [
    ['Basic and client_secret in the form', { form: post(client), headers: [['Authorization', basic]] }],
    [
      'Basic and another client_id in the form',
      { form: { ...grant, client_id: '00000000-0000-4000-8000-000000000000' }, headers: [['Authorization', basic]] },
    ],
    [
      'two Authorization headers',
      {
        form: grant,
        headers: [
          ['Authorization', basic],
          ['Authorization', basic],
        ],
      },
    ],
    ['Basic that is not base64', { form: grant, headers: [['Authorization', 'Basic ***']] }],
    [
      'Basic that is not UTF-8',
      { form: grant, headers: [['Authorization', `Basic ${Buffer.from([0xff, 0x3a, 0x61]).toString('base64')}`]] },
    ],
    ['Basic without a colon', { form: grant, headers: [['Authorization', `Basic ${btoa(client.keyId)}`]] }],
    [
      'Basic with a broken percent-encoding',
      { form: grant, headers: [['Authorization', `Basic ${btoa(`${client.keyId}:%zz`)}`]] },
    ],
  ]
  for (const [what, request] of cases) oauthError(t, await tokenRequest(gw.url, request), 400, 'invalid_request', what)
})

t.test('10 failed attempts in a minute for one client_id: 429 until the oldest is a minute old', async (t) => {
  const target = await clientKey(gw.url, parent)
  const bystander = await clientKey(gw.url, parent)
  const wrong = post({ ...target, clientSecret: bystander.clientSecret })
  for (let i = 1; i <= 10; i++)
    oauthError(t, await tokenRequest(gw.url, { form: wrong }), 401, 'invalid_client', `failure ${i}`)
  for (const [what, form] of [
    ['a further wrong secret', wrong],
    ['even the right secret', post(target)],
  ] as const) {
    const res = await tokenRequest(gw.url, { form })
    oauthError(t, res, 429, 'invalid_client', what)
    const retryAfter = Number(res.headers['retry-after'])
    t.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60, `Retry-After ${retryAfter}`)
  }
  const byBasic = await tokenRequest(gw.url, {
    form: grant,
    headers: [['Authorization', basicAuthorization(target.keyId.toUpperCase(), target.clientSecret)]],
  })
  oauthError(t, byBasic, 429, 'invalid_client', 'by Basic, the id in capitals')
  t.equal((await tokenRequest(gw.url, { form: post(bystander) })).status, 200, 'another client is not affected')

  // Unknown ids are counted too: guessing is bounded whatever the id.
  const unknown = post({ ...target, keyId: '11111111-1111-4111-8111-111111111111' })
  for (let i = 1; i <= 10; i++) await tokenRequest(gw.url, { form: unknown })
  oauthError(t, await tokenRequest(gw.url, { form: unknown }), 429, 'invalid_client', 'an unknown id')
})

t.test('the count is per client address: the right secret passes from another address', async (t) => {
  // Whoever knows a key id (X-Service-Key-Id, audit events, a token's sub) tries wrong secrets
  // from 127.0.0.2; the client itself connects from 127.0.0.1.
  const target = await clientKey(gw.url, parent)
  const attacker = { localAddress: '127.0.0.2' }
  const wrong = post({ ...target, clientSecret: client.clientSecret })
  for (let i = 1; i <= 10; i++)
    oauthError(t, await tokenRequest(gw.url, { form: wrong, ...attacker }), 401, 'invalid_client', `failure ${i}`)
  oauthError(
    t,
    await tokenRequest(gw.url, { form: post(target), ...attacker }),
    429,
    'invalid_client',
    'locked out there',
  )
  const fromHome = await tokenRequest(gw.url, { form: post(target), localAddress: '127.0.0.1' })
  t.equal(fromHome.status, 200, `the right secret from 127.0.0.1 gets its token (${fromHome.body.slice(0, 200)})`)
  oauthError(
    t,
    await tokenRequest(gw.url, { form: post(target), ...attacker }),
    429,
    'invalid_client',
    'still locked out there',
  )
})

t.test('a burst of wrong secrets sent at once gets no more than 10 of them checked', async (t) => {
  const target = await clientKey(gw.url, parent)
  const wrong = post({ ...target, clientSecret: client.clientSecret })
  // Each on its own connection, all in before the first is answered: the store is held up for a
  // moment (within the lookups' deadline) by a lock every read of api_keys waits for.
  const held = await gw.sql.reserve()
  t.teardown(() => held.release())
  await held`begin`
  await held`lock table api_keys in access exclusive mode`
  const burst = Promise.all(Array.from({ length: 40 }, () => tokenRequest(gw.url, { form: wrong })))
  await sleep(250)
  await held`rollback`
  const answers = await burst
  const statuses = answers.map((res) => res.status)
  t.equal(statuses.filter((s) => s === 401).length, 10, `10 checked and refused (${statuses.join(' ')})`)
  t.equal(statuses.filter((s) => s === 429).length, 30, 'the others locked out unchecked')
  oauthError(t, await tokenRequest(gw.url, { form: post(target) }), 429, 'invalid_client', 'then even the right secret')

  // The right secret sent at once by many workers is no failure: every one gets its token.
  const busy = await clientKey(gw.url, parent)
  const tokens = await Promise.all(Array.from({ length: 30 }, () => tokenRequest(gw.url, { form: post(busy) })))
  t.same(
    tokens.map((res) => res.status),
    Array(30).fill(200),
    'thirty right secrets at once: thirty tokens',
  )
})

t.test('a success forgets the failures before it', async (t) => {
  const c = await clientKey(gw.url, parent)
  const wrong = post({ ...c, clientSecret: client.clientSecret })
  for (let i = 1; i <= 9; i++) await tokenRequest(gw.url, { form: wrong })
  t.equal((await tokenRequest(gw.url, { form: post(c) })).status, 200, 'the right secret after nine failures')
  for (let i = 1; i <= 9; i++) await tokenRequest(gw.url, { form: wrong })
  t.equal((await tokenRequest(gw.url, { form: post(c) })).status, 200, 'nine more failures are not ten')
})

t.test('the request line and metrics count the endpoint, errors included', async (t) => {
  const count = (cls: string) => metricValue(gw.app, 'tgw_http_requests_total', { kind: 'token', status_class: cls })
  const [ok, refused] = [await count('2xx'), await count('4xx')]
  await tokenRequest(gw.url, { form: post(client) })
  await tokenRequest(gw.url, { form: grant })
  t.equal((await count('2xx')) - ok, 1, 'a 2xx of kind token')
  t.equal((await count('4xx')) - refused, 1, 'a 4xx of kind token')
  const res = await tokenRequest(gw.url, { form: grant, headers: [['X-Request-Id', 'token-req-1']] })
  t.equal(res.headers['x-request-id'], 'token-req-1', "the client's request id")
})

t.test('a store that does not answer: 503 temporarily_unavailable, not problem+json', async (t) => {
  // A transaction holds a lock every read of api_keys waits for, past the lookup's deadline.
  const held = gw.sql.reserve()
  const lock = await held
  t.teardown(() => lock.release())
  await lock`begin`
  await lock`lock table api_keys in access exclusive mode`
  try {
    const res = await tokenRequest(gw.url, { form: post(client) })
    t.equal(res.status, 503, `503 (${res.body.slice(0, 200)})`)
    t.same(res.json(), { error: 'temporarily_unavailable', error_description: res.json().error_description })
    t.equal(res.headers['retry-after'], '1', 'Retry-After: 1')
    noStore(t, res)
  } finally {
    await lock`rollback`
  }
  t.equal((await tokenRequest(gw.url, { form: post(client) })).status, 200, 'and a token again once it answers')
})

t.test('a body that does not arrive in time: 408 invalid_request, connection closed', async (t) => {
  const slow = await startGateway(t, {
    database: gw.database,
    redisKeyPrefix: gw.redisKeyPrefix,
    managementBodyTimeoutMs: 300,
  })
  const head = `POST /oauth2/token HTTP/1.1\r\nHost: gw\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\ngrant_type=`
  const { responses, closedByServer } = await rawExchange(slow.port, head, { waitMs: 5000 })
  t.equal(responses.length, 1, 'one answer')
  const [res] = responses
  t.equal(res?.status, 408)
  t.match(res?.header('content-type'), /^application\/json/)
  t.equal(res?.json().error, 'invalid_request')
  t.equal(res?.header('cache-control'), 'no-store')
  t.ok(closedByServer, 'the connection is closed')
})

t.test('authorization server metadata (RFC 8414): no key needed', async (t) => {
  const res = await rawRequest(gw.url, { path: '/.well-known/oauth-authorization-server' })
  t.equal(res.status, 200)
  t.match(String(res.headers['content-type']), /^application\/json/)
  t.same(res.json(), {
    issuer: ISSUER,
    token_endpoint: `${ISSUER}/oauth2/token`,
    jwks_uri: `${ISSUER}/.well-known/jwks.json`,
    grant_types_supported: ['client_credentials'],
    token_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post'],
    response_types_supported: [],
  })
  const token = (await tokenRequest(gw.url, { form: post(client) })).json().access_token
  t.equal(decodeProtectedHeader(token).kid, (await (await fetch(`${gw.url}/.well-known/jwks.json`)).json()).keys[0].kid)
})

t.test('nothing above reached the upstream', async (t) => {
  t.same(
    upstream.received.map((r) => `${r.method} ${r.url}`),
    [],
  )
})

t.test('the form helpers of this file encode as RFC 6749 Appendix B says', async (t) => {
  t.equal(formEncode('a b+c:d/é'), 'a+b%2Bc%3Ad%2F%C3%A9')
})
