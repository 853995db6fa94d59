// Errors that say where and what to do (docs/api.md), over real sockets: a body that is not JSON
// says where it stops being JSON; another scheme than Bearer, or a client secret sent as a key,
// is told what to send; a typo deep in `limits` is named without the anyOf noise; a local webhook
// URL mentions WEBHOOKS_ALLOW_INSECURE, never the address a name resolved to; and a gateway
// started without ISSUER_URL says which issuer it uses. Codes and statuses are unchanged.
import { Writable } from 'node:stream'
import pino from 'pino'
import t from 'tap'
import { loggerOptions } from '../../src/ops/logging.js'
import { startGateway } from '../helpers/gateway.js'
import { callAs, rawRequest } from '../helpers/http.js'
import { checkProblem } from '../helpers/problems.js'
import { basicAuthorization, clientKey } from '../helpers/tokens.js'
import { closedPort, startUpstream } from '../helpers/upstream.js'

const upstream = await startUpstream(t)
const gw = await startGateway(t, {
  gatewayConfig: { routes: [{ prefix: '/v1/orders', upstream: upstream.url }] },
  // A name that resolves to a private address, and one that does not resolve: no DNS is asked.
  webhookLookup: async (hostname) => {
    if (hostname === 'hooks.internal.test') return [{ address: '10.20.30.40', family: 4 }]
    throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' })
  },
})
const parent = await gw.createParent()
const client = await clientKey(gw.url, parent)

const post = (path: string, body: string) =>
  callAs(gw.url, parent.apiKey, {
    method: 'POST',
    path,
    acting: 'self',
    body,
    headers: [['Content-Type', 'application/json']],
  })
const subAccountCount = async () =>
  Number((await gw.sql`select count(*)::int as n from tenants where parent_id is not null`)[0]!.n)

t.test('a body that is not JSON: where it stops being JSON, and what to send', async (t) => {
  const before = await subAccountCount()
  for (const [body, detail] of [
    [
      '{\n  "name": "a",\n}',
      'the body must be JSON: at line 3, column 1, expected a property name in double quotes, found "}"',
    ],
    ['{"name": "a"', "the body must be JSON: at line 1, column 13, expected ',' or '}', found the end of the body"],
    [
      '{"name": "é", "x": tru}',
      'the body must be JSON: at line 1, column 20, expected a value (an object, array, string, number, true, false or null), found "t"',
    ],
    [
      '{"name": "a"} {}',
      'the body must be JSON: at line 1, column 15, expected the end of the body (one JSON value only), found "{"',
    ],
  ] as const) {
    const res = await post('/v1/sub-accounts', body)
    const problem = checkProblem(t, res, 400, 'invalid_json', JSON.stringify(body))
    t.equal(problem.detail, detail, JSON.stringify(body))
  }
  const poisoned = await post('/v1/sub-accounts', '{"name": "a", "__proto__": {"x": 1}}')
  t.match(checkProblem(t, poisoned, 400, 'invalid_json', '__proto__').detail, /"__proto__".*which the gateway refuses/)
  t.equal(await subAccountCount(), before, 'nothing was made')
})

t.test('another scheme than Bearer: named, and told what to send', async (t) => {
  const basic = basicAuthorization(client.keyId, client.clientSecret)
  const credentials = basic.slice('Basic '.length)
  for (const scheme of ['Basic', 'basic', 'BASIC', 'bAsIc']) {
    for (const [method, path] of [
      ['GET', '/v1/orders/1'],
      ['GET', '/v1/sub-accounts'],
    ] as const) {
      const res = await rawRequest(gw.url, { method, path, headers: [['Authorization', `${scheme} ${credentials}`]] })
      const what = `${scheme} on ${path}`
      const problem = checkProblem(t, res, 401, 'unauthenticated', what)
      t.equal(res.headers['www-authenticate'], 'Bearer', `${what}: WWW-Authenticate`)
      t.equal(
        problem.detail,
        `the Authorization scheme is ${scheme}, not Bearer: send the API key as \`Authorization: Bearer tgw_…\`; ` +
          'to use a key id and client secret, trade them at POST /oauth2/token for an access token',
        what,
      )
      t.notMatch(res.body, credentials, `${what}: the credentials are not echoed`)
    }
  }
  const alone = await rawRequest(gw.url, { path: '/v1/orders/1', headers: [['Authorization', 'Basic']] })
  t.match(
    checkProblem(t, alone, 401, 'unauthenticated', 'Basic alone').detail,
    /^the Authorization scheme is Basic, not Bearer: /,
  )
  const lone = await rawRequest(gw.url, { path: '/v1/orders/1', headers: [['Authorization', 'sk_live_abcdef']] })
  const loneDetail = checkProblem(t, lone, 401, 'unauthenticated', 'an unknown lone word').detail
  t.match(loneDetail, /^the Authorization scheme is not Bearer: send the API key as /)
  t.notMatch(loneDetail, 'sk_live_abcdef', 'a lone word that may be a credential is not echoed')
  t.equal(upstream.received.length, 0, 'nothing reached the upstream')
})

t.test('a mistyped key: what is wrong with it (its checksum, its length), never the key itself', async (t) => {
  const key = parent.apiKey
  const at = 10
  const mistyped = `${key.slice(0, at)}${key[at] === 'a' ? 'b' : 'a'}${key.slice(at + 1)}`
  for (const [sent, reason] of [
    [mistyped, 'its checksum (the last 6 characters) does not match the rest: a character is mistyped'],
    [key.slice(0, -1), 'an API key has 49 characters after tgw_, this one 48'],
    [`${key}x`, 'an API key has 49 characters after tgw_, this one 50'],
    [`${key.slice(0, -1)}-`, 'an API key has only letters and digits after tgw_'],
    [`sk-${key.slice(4, 10)}`, 'an API key starts with tgw_'],
    ['Bearer', 'send one key after Bearer'],
  ] as const) {
    const res = await rawRequest(gw.url, {
      path: '/v1/sub-accounts',
      headers: [['Authorization', sent === 'Bearer' ? sent : `Bearer ${sent}`]],
    })
    const problem = checkProblem(t, res, 401, 'unauthenticated', reason)
    t.equal(problem.detail, `the API key is malformed: ${reason}; copy the whole key, as it was shown once`, reason)
    // No run of 8 characters of the key comes back.
    for (let i = 4; i + 8 <= key.length; i++) t.notMatch(problem.detail, key.slice(i, i + 8), `${reason}: not echoed`)
  }
})

t.test(
  'a key without its tgw_: unknown (it may be a key imported from elsewhere), and what a key starts with',
  async (t) => {
    const res = await rawRequest(gw.url, {
      path: '/v1/sub-accounts',
      headers: [['Authorization', `Bearer ${parent.apiKey.slice(4)}`]],
    })
    const problem = checkProblem(t, res, 401, 'unauthenticated', 'looked up as an imported key would be')
    t.equal(problem.detail, 'the API key is unknown or revoked; a key the gateway made starts with tgw_')
  },
)

t.test('an external_id where the path takes a UUID: 404 pointing to ?external_id=', async (t) => {
  const externalId = `acme-eu-${Date.now()}`
  const made = await post('/v1/sub-accounts', JSON.stringify({ name: 'Acme EU', external_id: externalId }))
  t.equal(made.status, 201)
  const get = (path: string) => callAs(gw.url, parent.apiKey, { method: 'GET', path, acting: 'self' })
  const hint = `; to find the one whose external_id is ${externalId}, GET /v1/sub-accounts?external_id=${externalId}`
  for (const path of [`/v1/sub-accounts/${externalId}`, `/v1/sub-accounts/${externalId}/api-keys`]) {
    const problem = checkProblem(t, await get(path), 404, 'not_found', path)
    t.equal(problem.detail, `no such sub-account: the path takes its id, a UUID${hint}`, path)
  }
  const found = await get(`/v1/sub-accounts?external_id=${externalId}`)
  t.same(
    (found.json() as { data: { external_id: string }[] }).data.map((s) => s.external_id),
    [externalId],
    'where it points finds it',
  )
  const plus = checkProblem(t, await get('/v1/sub-accounts/eu+1'), 404, 'not_found', 'a + in it')
  t.match(plus.detail, /GET \/v1\/sub-accounts\?external_id=eu%2B1$/, 'encoded for a query')
  const endpoint = checkProblem(t, await get('/v1/sub-accounts/webhook-endpoints/acme'), 404, 'not_found', 'endpoint')
  t.equal(endpoint.detail, 'no such webhook endpoint: the path takes its id, a UUID', 'another id: no hint')
  const unknown = checkProblem(t, await get(`/v1/sub-accounts/${crypto.randomUUID()}`), 404, 'not_found', 'unknown')
  t.equal(unknown.detail, 'no such sub-account', 'a UUID no one has: as before')
})

t.test('a body of another type: the Content-Type that came is named', async (t) => {
  const before = await subAccountCount()
  const send = (headers: [string, string][]) =>
    callAs(gw.url, parent.apiKey, {
      method: 'POST',
      path: '/v1/sub-accounts',
      acting: 'self',
      body: '{"name":"a"}',
      headers,
    })
  for (const [type, came] of [
    ['text/plain; charset=utf-8', 'Content-Type text/plain'],
    ['application/x-www-form-urlencoded', 'Content-Type application/x-www-form-urlencoded'],
    [null, 'no Content-Type'],
  ] as const) {
    const res = await send(type === null ? [] : [['Content-Type', type]])
    const problem = checkProblem(t, res, 415, 'unsupported_media_type', String(type))
    t.equal(problem.detail, `this endpoint accepts application/json only; the body came with ${came}`, String(type))
  }
  const notAType = checkProblem(t, await send([['Content-Type', 'json']]), 415, 'unsupported_media_type', 'json')
  t.equal(
    notAType.detail,
    'the body came with Content-Type json, which is not a media type (type/subtype, as application/json)',
  )
  t.equal(await subAccountCount(), before, 'nothing was made')

  const token = await rawRequest(gw.url, {
    method: 'POST',
    path: '/oauth2/token',
    headers: [['Content-Type', 'application/json']],
    body: '{"grant_type":"client_credentials"}',
  })
  t.equal(token.status, 400, 'the token endpoint: 400 invalid_request, as OAuth answers')
  t.same(token.json(), {
    error: 'invalid_request',
    error_description: 'the body must be application/x-www-form-urlencoded; it came with Content-Type application/json',
  })
})

t.test('a client secret sent as the key: told it is not a key, and what to send', async (t) => {
  for (const [method, path] of [
    ['GET', '/v1/orders/1'],
    ['GET', '/v1/sub-accounts'],
  ] as const) {
    for (const authorization of [
      `Bearer ${client.clientSecret}`,
      `bearer ${client.clientSecret}`,
      client.clientSecret,
    ]) {
      const res = await rawRequest(gw.url, { method, path, headers: [['Authorization', authorization]] })
      const what = `${authorization.slice(0, 12)}… on ${path}`
      const problem = checkProblem(t, res, 401, 'unauthenticated', what)
      t.equal(
        problem.detail,
        'a client secret (tgws_…) is not an API key: send the API key as `Authorization: Bearer tgw_…`; ' +
          'to use a key id and client secret, trade them at POST /oauth2/token for an access token',
        what,
      )
      t.notMatch(res.body, client.clientSecret, `${what}: the secret is not echoed`)
    }
  }
  t.equal(upstream.received.length, 0, 'nothing reached the upstream')
})

t.test('a typo deep in limits: the field and its path, what is allowed, no anyOf noise', async (t) => {
  const typo = { name: 'typo', limits: { rate: { requsts: 5, per_seconds: 1 } } }
  const expected = [
    { path: '/body/limits/rate/requests', message: 'is required' },
    { path: '/body/limits/rate/requsts', message: 'is not a known field (allowed: requests, per_seconds)' },
  ]
  const before = await subAccountCount()
  const created = await post('/v1/sub-accounts', JSON.stringify(typo))
  const problem = checkProblem(t, created, 400, 'validation_failed', 'create')
  t.same(problem.errors, expected, 'create: the two fields at fault, and nothing else')
  t.equal(
    problem.detail,
    '/body/limits/rate/requests is required; /body/limits/rate/requsts is not a known field (allowed: requests, per_seconds)',
  )
  t.notMatch(created.body, /anyOf|must be null/, 'create: no anyOf noise')
  t.equal(await subAccountCount(), before, 'nothing was made')

  const sub = await post('/v1/sub-accounts', JSON.stringify({ name: 'patched' }))
  const patched = await callAs(gw.url, parent.apiKey, {
    method: 'PATCH',
    path: `/v1/sub-accounts/${sub.json().id}`,
    acting: 'self',
    json: { limits: { rate: { requsts: 5, per_seconds: 1 } } },
  })
  t.same(checkProblem(t, patched, 400, 'validation_failed', 'PATCH').errors, expected, 'PATCH: the same')
  t.notMatch(patched.body, /anyOf|must be null/, 'PATCH: no anyOf noise')

  const wrongKind = await post('/v1/sub-accounts', JSON.stringify({ name: 'kind', limits: { rate: 5 } }))
  t.same(checkProblem(t, wrongKind, 400, 'validation_failed', 'rate: 5').errors, [
    { path: '/body/limits/rate', message: 'must be an object or null' },
  ])
  const unknownMember = await post('/v1/sub-accounts', JSON.stringify({ name: 'x', limits: { rates: {} } }))
  t.same(checkProblem(t, unknownMember, 400, 'validation_failed', 'rates').errors, [
    {
      path: '/body/limits/rates',
      message: 'is not a known field (allowed: rate, monthly_quota, meters, credits, shadow)',
    },
  ])
})

t.test('a local or private webhook URL: WEBHOOKS_ALLOW_INSECURE named, the resolved address never', async (t) => {
  const register = (url: string) =>
    post('/v1/sub-accounts/webhook-endpoints', JSON.stringify({ url, event_types: ['api_key.*'] }))
  const hint = 'for local development, the gateway accepts such URLs when started with WEBHOOKS_ALLOW_INSECURE=true'
  for (const [url, reason] of [
    ['https://127.0.0.1:9/hook', 'url host 127.0.0.1 is a loopback address'],
    ['https://192.168.1.20/hook', 'url host 192.168.1.20 is a private address'],
    ['https://localhost/hook', 'url host localhost is loopback'],
    ['http://1.1.1.1/hook', 'url must use https'],
    ['https://hooks.internal.test/hook', 'url host hooks.internal.test resolves to an address that is not allowed'],
  ] as const) {
    const problem = checkProblem(t, await register(url), 400, 'validation_failed', url)
    t.same(problem.errors, [{ path: '/body/url', message: `${reason}; ${hint}` }], url)
  }
  const resolved = await register('https://hooks.internal.test/other')
  t.notMatch(resolved.body, '10.20.30.40', 'the address the name resolved to is not named')
  const unresolved = checkProblem(t, await register('https://nowhere.test/hook'), 400, 'validation_failed', 'no name')
  t.notMatch(
    String(unresolved.detail),
    'WEBHOOKS_ALLOW_INSECURE',
    'a name that does not resolve is not told to lift the rule',
  )
  t.equal(Number((await gw.sql`select count(*)::int as n from webhook_endpoints`)[0]!.n), 0, 'nothing was registered')
})

t.test('an upstream that cannot be reached: the log names its URL, its route and the cause', async (t) => {
  const lines: string[] = []
  const sink = new Writable({
    write(chunk, _encoding, done) {
      lines.push(...String(chunk).split('\n').filter(Boolean))
      done()
    },
  })
  const port = await closedPort()
  const upstreamUrl = `http://127.0.0.1:${port}/base`
  const down = await startGateway(t, {
    logger: pino(loggerOptions('info'), sink),
    redis: false,
    gatewayConfig: { routes: [{ prefix: '/v1/down', upstream: upstreamUrl }] },
  })
  const owner = await down.createParent()
  const res = await callAs(down.url, owner.apiKey, { path: '/v1/down/x' })
  t.equal(checkProblem(t, res, 502, 'upstream_unavailable', 'refused').detail, 'the upstream could not be reached')
  t.notMatch(res.body, String(port), 'the client is told nothing of the upstream')
  const logged = lines.map((line) => JSON.parse(line)).filter((entry) => entry.code === 'upstream_unavailable')
  t.equal(logged.length, 1, 'one line')
  t.match(logged[0], {
    level: 50,
    upstream: upstreamUrl,
    route: '/v1/down',
    cause: new RegExp(`ECONNREFUSED 127\\.0\\.0\\.1:${port}`),
    msg: new RegExp(`^the upstream could not be reached: ${upstreamUrl} \\(route /v1/down\\): .*ECONNREFUSED`),
  })
})

t.test('started without ISSUER_URL: one warning naming the issuer used, the one discovery shows', async (t) => {
  const lines: string[] = []
  const sink = new Writable({
    write(chunk, _encoding, done) {
      lines.push(...String(chunk).split('\n').filter(Boolean))
      done()
    },
  })
  const logger = pino(loggerOptions('info'), sink)
  const unset = await startGateway(t, { logger, redis: false })
  const warnings = lines.map((line) => JSON.parse(line)).filter((entry) => /ISSUER_URL/.test(entry.msg))
  t.equal(warnings.length, 1, 'one line')
  const discovery = await rawRequest(unset.url, { path: '/.well-known/oauth-authorization-server' })
  const { issuer } = discovery.json() as { issuer: string }
  t.equal(warnings[0].level, 40, 'a warning')
  t.equal(warnings[0].issuer, issuer, 'the issuer discovery shows')
  t.match(
    warnings[0].msg,
    `ISSUER_URL is not set, so the issuer of access tokens, identity assertions and /.well-known/oauth-authorization-server is ${issuer}`,
  )
  t.match(warnings[0].msg, /set ISSUER_URL to the address clients use$/)
  t.not(
    new URL(issuer).origin,
    new URL(unset.url).origin,
    'reached at 127.0.0.1, the default issuer is another address',
  )

  lines.length = 0
  await startGateway(t, { logger, redis: false, env: { ISSUER_URL: 'https://gateway.test' } })
  t.same(
    lines.filter((line) => /ISSUER_URL/.test(line)),
    [],
    'ISSUER_URL set: no warning',
  )
})
