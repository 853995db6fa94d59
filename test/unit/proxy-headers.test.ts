// What the upstream receives (docs/api.md) and which paths never get that far, as plain functions.
import type { IncomingHttpHeaders } from 'node:http'
import t from 'tap'
import {
  isTrustedLookalike,
  SPOOFING,
  upstreamHeaders,
  type ForwardContext,
  type TrustedIdentity,
} from '../../src/proxy/headers.js'
import { isReservedPath } from '../../src/proxy/paths.js'
import { isBadPath, pathOf } from '../../src/http/bad-paths.js'

const IDENTITY: TrustedIdentity = {
  resolvedTenantId: 'aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa',
  callerTenantId: '11111111-1111-4111-8111-111111111111',
  keyId: '99999999-9999-4999-8999-999999999999',
  scopes: ['tracking:read', 'tracking:write', 'files:*'],
}

const context = (overrides: Partial<ForwardContext> = {}): ForwardContext => ({
  identity: IDENTITY,
  requestId: 'req-1',
  forwardAuthorization: false,
  peerAddress: '203.0.113.7',
  proto: 'http',
  host: 'gateway.example',
  connection: undefined,
  passHeaders: new Set(),
  ...overrides,
})

const TRUSTED = ['x-service-resolved-tenant', 'x-service-caller-tenant', 'x-service-key-id', 'x-service-scopes']

// As Node hands them over: names lower-cased, repeats of a custom header folded into one value.
const inbound = (): IncomingHttpHeaders => ({
  host: 'gateway.example',
  accept: 'application/json',
  'content-type': 'application/json',
  'content-length': '12',
  'user-agent': 'curl/8',
  authorization: 'Bearer tgw_secret',
  'x-service-resolved-tenant': 'ffffffff-ffff-4fff-8fff-ffffffffffff',
  'x-service-caller-tenant': 'ffffffff-ffff-4fff-8fff-ffffffffffff',
  'x-service-key-id': 'forged',
  'x-service-scopes': 'admin:*',
  'x-service-acting-tenant': 'self',
  'x-service-anything-else': 'a, b',
  'x-service-': 'empty suffix',
  'x-services': 'not our prefix',
  'x-servicex-y': 'not our prefix either',
  'x-request-id': 'client-id',
  'x-forwarded-proto': 'https',
  'x-forwarded-host': 'evil.example',
  'set-cookie': ['a=1', 'b=2'],
})

t.test('every client-sent x-service-* is gone and the trusted ones are set', async (t) => {
  const out = upstreamHeaders(inbound(), context())
  t.equal(out['x-service-resolved-tenant'], IDENTITY.resolvedTenantId)
  t.equal(out['x-service-caller-tenant'], IDENTITY.callerTenantId)
  t.equal(out['x-service-key-id'], IDENTITY.keyId)
  t.equal(out['x-service-scopes'], 'tracking:read tracking:write files:*', 'scopes space-separated')
  t.equal(out['x-request-id'], 'req-1', "the gateway's request id, not the client's")
  const serviceHeaders = Object.keys(out)
    .filter((name) => name.startsWith('x-service-'))
    .sort()
  t.same(serviceHeaders, [...TRUSTED].sort(), 'exactly the four trusted x-service-* headers, nothing the client sent')
  t.equal(out['x-services'], 'not our prefix', 'a header that only looks alike is kept')
  t.equal(out['x-servicex-y'], 'not our prefix either')
  t.same(out['set-cookie'], ['a=1', 'b=2'], 'a multi-valued header is kept as it came')
  t.equal(out.accept, 'application/json')
  t.equal(out['content-length'], '12')
  t.equal(out['user-agent'], 'curl/8')

  const noScopes = upstreamHeaders({}, context({ identity: { ...IDENTITY, scopes: [] } }))
  t.equal(noScopes['x-service-scopes'], '', 'a key without scopes: an empty value')
})

t.test("X-Service-Identity: the client's never, the gateway's on a route that signs", async (t) => {
  const forged = { 'x-service-identity': 'forged.a.b', x_service_identity: 'forged.c.d', 'x.service.identity': 'e.f.g' }
  const unsigned = upstreamHeaders(forged, context())
  t.same(
    Object.keys(unsigned).filter((name) => isTrustedLookalike(name)),
    TRUSTED,
    'a route without identity: none of them, whatever the spelling',
  )
  const signed = upstreamHeaders(forged, context({ identity: { ...IDENTITY, assertion: 'signed.by.gateway' } }))
  t.equal(signed['x-service-identity'], 'signed.by.gateway', "the gateway's assertion")
  t.same(
    Object.keys(signed).filter((name) => isTrustedLookalike(name)),
    [...TRUSTED, 'x-service-identity'],
    'and no other spelling',
  )
  const named = upstreamHeaders(
    forged,
    context({ identity: { ...IDENTITY, assertion: 'signed.by.gateway' }, connection: 'x-service-identity' }),
  )
  t.equal(named['x-service-identity'], 'signed.by.gateway', 'a Connection header naming it cannot remove it')
  t.notOk('x-service-identity' in upstreamHeaders(forged, context({ identity: null })), 'a public route: none')
})

t.test('a public route: nothing injected, still nothing client-sent', async (t) => {
  const out = upstreamHeaders(inbound(), context({ identity: null }))
  for (const name of TRUSTED) t.notOk(name in out, `${name} absent`)
  t.same(
    Object.keys(out).filter((name) => name.startsWith('x-service-')),
    [],
    'no x-service-* at all',
  )
  t.equal(out['x-request-id'], 'req-1', 'the request id is still set')
  t.equal(out['x-forwarded-proto'], 'http')
})

t.test('Authorization is forwarded only when the route says so', async (t) => {
  t.notOk('authorization' in upstreamHeaders(inbound(), context()), 'dropped by default')
  t.equal(
    upstreamHeaders(inbound(), context({ forwardAuthorization: true })).authorization,
    'Bearer tgw_secret',
    'forward_authorization: true',
  )
  t.notOk(
    'proxy-authorization' in
      upstreamHeaders({ 'proxy-authorization': 'Basic x' }, context({ forwardAuthorization: true })),
    'Proxy-Authorization never',
  )
})

t.test('hop-by-hop headers are dropped', async (t) => {
  const hopByHop = ['connection', 'keep-alive', 'proxy-connection', 'proxy-authorization', 'te', 'trailer', 'upgrade']
  const given: IncomingHttpHeaders = { accept: '*/*' }
  for (const name of hopByHop) given[name] = 'x'
  const out = upstreamHeaders(given, context({ connection: 'x' }))
  for (const name of hopByHop) t.notOk(name in out, `${name} dropped`)
  t.equal(out.accept, '*/*')
})

t.test('headers named in Connection are dropped, in any case and spacing', async (t) => {
  const given: IncomingHttpHeaders = {
    connection: ' X-Custom-One ,x-custom-TWO,,  Accept-Language',
    'x-custom-one': '1',
    'x-custom-two': '2',
    'accept-language': 'en',
    'x-custom-three': '3',
    'x-forwarded-for': '198.51.100.1',
    authorization: 'Bearer k',
  }
  const out = upstreamHeaders(given, context({ connection: given.connection, forwardAuthorization: true }))
  t.notOk('x-custom-one' in out)
  t.notOk('x-custom-two' in out)
  t.notOk('accept-language' in out)
  t.equal(out['x-custom-three'], '3', 'a header not named is kept')
  t.equal(out.authorization, 'Bearer k')

  // Naming the trusted headers, the request id or X-Forwarded-* cannot remove what the gateway sets.
  const attack =
    'X-Service-Resolved-Tenant, X-Service-Caller-Tenant, X-Service-Key-Id, X-Service-Scopes, X-Request-Id, X-Forwarded-For, X-Forwarded-Proto, X-Forwarded-Host, Authorization'
  const kept = upstreamHeaders(
    { ...given, connection: attack },
    context({ connection: attack, forwardAuthorization: true }),
  )
  for (const name of TRUSTED) t.ok(typeof kept[name] === 'string' && kept[name] !== '', `${name} still set`)
  t.equal(kept['x-request-id'], 'req-1')
  t.equal(
    kept['x-forwarded-for'],
    '203.0.113.7',
    'the client-sent X-Forwarded-For named by Connection is dropped; the peer is still added',
  )
  t.equal(kept['x-forwarded-proto'], 'http')
  t.equal(kept['x-forwarded-host'], 'gateway.example')
  t.notOk('authorization' in kept, 'Connection: Authorization removes it even when it would be forwarded')

  const asArray = upstreamHeaders({ 'x-a': '1', 'x-b': '2', 'x-c': '3' }, context({ connection: ['X-A', ' x-b '] }))
  t.same(
    Object.keys(asArray).filter((name) => name.startsWith('x-') && name.length === 3),
    ['x-c'],
    'Connection given as a list of values',
  )
})

t.test('X-Forwarded-*', async (t) => {
  const appended = upstreamHeaders({ 'x-forwarded-for': '198.51.100.1, 198.51.100.2' }, context())
  t.equal(
    appended['x-forwarded-for'],
    '198.51.100.1, 198.51.100.2, 203.0.113.7',
    'the peer is appended to an existing value',
  )
  t.equal(upstreamHeaders({}, context())['x-forwarded-for'], '203.0.113.7', 'or is the whole value')
  t.equal(
    upstreamHeaders({ 'x-forwarded-for': '' }, context())['x-forwarded-for'],
    '203.0.113.7',
    'an empty value is replaced',
  )
  t.equal(
    upstreamHeaders({ 'x-forwarded-for': '198.51.100.1' }, context({ peerAddress: undefined }))['x-forwarded-for'],
    '198.51.100.1',
    'no peer address: kept as it came',
  )

  const overwritten = upstreamHeaders(
    { 'x-forwarded-proto': 'https', 'x-forwarded-host': 'evil.example' },
    context({ proto: 'http', host: 'gw.example:8080' }),
  )
  t.equal(overwritten['x-forwarded-proto'], 'http', 'X-Forwarded-Proto overwritten')
  t.equal(overwritten['x-forwarded-host'], 'gw.example:8080', 'X-Forwarded-Host overwritten')
  t.equal(upstreamHeaders({}, context({ proto: 'https' }))['x-forwarded-proto'], 'https')
  t.notOk(
    'x-forwarded-host' in upstreamHeaders({ 'x-forwarded-host': 'evil.example' }, context({ host: undefined })),
    'no Host: the client value is still not forwarded',
  )
})

t.test('the inbound object is not changed', async (t) => {
  const given = inbound()
  const copy = structuredClone(given)
  upstreamHeaders(given, context({ connection: 'accept' }))
  t.same(given, copy)
})

t.test('isBadPath: every pattern of docs/api.md', async (t) => {
  const bad = [
    '/v1/../sub-accounts',
    '/..',
    '/v1/x/..',
    '/v1/x..y',
    '/v1/%2e%2e/x',
    '/v1/%2E%2E/x',
    '/v1/%2e%2E/x',
    '/v1/.%2e/x',
    '/v1/.%2E/x',
    '/v1/%2e./x',
    '/v1/%2E./x',
    '/v1/a%2fb',
    '/v1/a%2Fb',
    '/v1/a%5cb',
    '/v1/a%5Cb',
    '/v1/a\\b',
    '//v1/x',
    '/v1//x',
    '/v1/x//',
    '/v1/x;jsessionid=1',
    '/v1/x;',
    '/;/x',
    // A lone dot segment: WHATWG URL drops it when the upstream URL is built.
    '/v1/./x',
    '/v1/%2e/x',
    '/v1/%2E',
    '/v1/x/.',
    '/./v1/x',
    // A control character, percent-encoded in any case, or raw (app.inject can send one).
    '/v1/x%00',
    '/v1/x%00.json',
    '/v1/a%0ab',
    '/v1/a%0Ab',
    '/v1/a%0d%0aSet-Cookie:x',
    '/v1/a%09b',
    '/v1/a%1fb',
    '/v1/a%1Fb',
    '/v1/a%7fb',
    '/v1/a%7Fb',
    '/v1/a\u0000b',
    '/v1/a\nb',
    '/v1/a\u007fb',
    // `;` and `#` encoded, and every rule again for the path decoded once and twice.
    '/v1/x%3bjsessionid=1',
    '/v1/x%3B',
    '/v1/x%23y',
    '/v1/a%250a',
    '/v1/%252e%252e/x',
    '/v1/%25252e%25252e/x',
    '/v1/a%252fb',
    '/v1/a%253b',
    '/v1/%252e/x',
  ]
  for (const path of bad) t.ok(isBadPath(path), `${JSON.stringify(path)} is bad`)

  const good = [
    '/',
    '/v1/a.b/c',
    '/v1/.well-known/x',
    '/v1/a./b',
    '/v1/.x/y',
    '/v1/%2ex/y',
    '/v1/a%20b',
    '/v1/%2',
    '/v1/x/',
    '/v1/caf%C3%A9',
    '/v1/sub-accounts',
    '/v1/a%20b%21',
    '/v1/%80',
    '/v1/a%2000',
    '/v1/100%25',
    '/v1/a%2520b',
    '/v1/%2525252e%2525252e',
  ]
  for (const path of good) t.notOk(isBadPath(path), `${path} is fine`)

  t.equal(pathOf('/v1/x?next=../..//;'), '/v1/x', 'the query string is not the path')
  t.notOk(isBadPath(pathOf('/v1/x?next=../..//;')), 'so a query may hold what a path may not')
  t.equal(pathOf('/v1/x'), '/v1/x')
  t.equal(pathOf('/v1/x?'), '/v1/x')
})

t.test('isReservedPath: decoded, case-insensitive, trailing dots and spaces dropped, whole segments', async (t) => {
  const management = [
    '/v1/sub-accounts',
    '/v1/sub-accounts/',
    '/v1/sub-accounts/usage',
    '/v1/sub-accounts/x/y/z',
    '/V1/SUB-ACCOUNTS',
    '/V1/Sub-Accounts/abc',
    '/v1/sub%2Daccounts',
    '/v1/sub%2daccounts/x',
    '/%76%31/%73ub-accounts',
    '/v1/SUB%2DACCOUNTS/x',
    '/healthz',
    '/HEALTHZ/x',
    '/readyz',
    '/openapi.json',
    '/openapi.json/x',
    '/docs',
    '/docs/static/index.html',
    '/%64ocs',
    // Trailing dots and spaces of a segment, which many upstreams drop.
    '/v1/sub-accounts.',
    '/v1/sub-accounts./x',
    '/v1/sub-accounts%20',
    '/v1/sub-accounts%20/x',
    '/v1/Sub-Accounts%2e%20./x',
    '/v1./sub-accounts',
    '/V1%20/sub-accounts',
    '/healthz.',
    '/readyz%20',
    '/openapi.json.',
    '/docs./x',
  ]
  for (const path of management) t.ok(isReservedPath(path), `${path} is reserved`)

  const other = [
    '/v1/sub-accountsX',
    '/v1/sub-accounts-archive',
    '/v1/sub-account',
    '/v2/sub-accounts',
    '/x/v1/sub-accounts',
    '/v1',
    '/',
    '/v1/sub-accounts%',
    '/healthzz',
    '/documents',
    '/x/docs',
    '/openapi.jsonx',
    '/v1/sub-accounts.x',
    '/v1/.sub-accounts',
    '/v1/%20sub-accounts',
    '/healthz.x',
  ]
  for (const path of other) t.notOk(isReservedPath(path), `${path} is not reserved`)
})

t.test('lookalikes of X-Service-* are dropped: _ and . read as - (a CGI upstream folds them)', async (t) => {
  const lookalikes = [
    'x_service_resolved_tenant',
    'x-service_resolved-tenant',
    'x.service.resolved.tenant',
    'x_service-key-id',
    'x.service_scopes',
    'x-service-',
    'x_service_',
  ]
  const headers = upstreamHeaders(
    { ...inbound(), ...Object.fromEntries(lookalikes.map((name) => [name, 'forged'])) },
    context(),
  )
  for (const name of lookalikes) {
    t.equal(headers[name], undefined, `${name} is dropped`)
    t.ok(isTrustedLookalike(name), `${name} reads as X-Service-*`)
  }
  t.equal(headers['x-service-resolved-tenant'], IDENTITY.resolvedTenantId, "the trusted one is the gateway's")
  for (const name of ['x-services', 'xservice-a', 'x-servic-a', 'x-service', 'y-service-a', 'x--service-a']) {
    t.notOk(isTrustedLookalike(name), `${name} is not a lookalike`)
  }
})

t.test('another spelling of a framing header is dropped: Content_Length, transfer.encoding', async (t) => {
  const spellings = ['content_length', 'content.length', 'transfer_encoding', 'transfer.encoding']
  const sent: IncomingHttpHeaders = { 'content-length': '5' }
  for (const name of spellings) sent[name] = '1000'
  const out = upstreamHeaders(sent, context())
  for (const name of spellings) t.notOk(name in out, `${name} dropped`)
  t.equal(out['content-length'], '5', 'the real Content-Length goes on (undici frames the body by it)')
})

t.test('method, path and address overrides are dropped unless the route passes them', async (t) => {
  t.same([...SPOOFING].sort(), [
    'cf-connecting-ip',
    'client-ip',
    'fastly-client-ip',
    'forwarded',
    'true-client-ip',
    'x-client-ip',
    'x-cluster-client-ip',
    'x-http-method',
    'x-http-method-override',
    'x-method-override',
    'x-original-method',
    'x-original-url',
    'x-originating-ip',
    'x-real-ip',
    'x-remote-addr',
    'x-remote-ip',
    'x-rewrite-url',
  ])
  const sent = { ...inbound(), ...Object.fromEntries([...SPOOFING].map((name) => [name, 'client-said'])) }
  const dropped = upstreamHeaders(sent, context())
  for (const name of SPOOFING) t.equal(dropped[name], undefined, `${name} is dropped by default`)
  const passed = upstreamHeaders(sent, context({ passHeaders: new Set(['x-real-ip', 'forwarded']) }))
  t.equal(passed['x-real-ip'], 'client-said', 'a route may pass X-Real-IP')
  t.equal(passed.forwarded, 'client-said', 'and Forwarded')
  t.equal(passed['x-http-method-override'], undefined, 'but only what it names')
})
