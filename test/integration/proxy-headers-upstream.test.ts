// The proxy over real sockets: what the upstream receives (docs/api.md): the trusted identity and
// nothing spoofed, the headers a route passes, the request id, the forwarding headers, hop-by-hop
// headers and the query string, byte for byte. The identity checks: test/helpers/proxy-identity.ts.
import t, { type Test } from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { rawRequest, type RawResponse, sha256 } from '../helpers/http.js'
import { rawExchange } from '../helpers/hostile.js'
import { checkProblem } from '../helpers/problems.js'
import { type ReceivedRequest, startUpstream } from '../helpers/upstream.js'
import { checkIdentity, type Identity, keyIdOf, PARENT_SCOPES, rawNameCounts } from '../helpers/proxy-identity.js'
import { UUID_V4ISH } from '../helpers/proxy-identity.js'

const upstream = await startUpstream(t)
const gw = await startGateway(t, {
  upstreamUrl: upstream.url,
  gatewayConfig: {
    routes: [
      { prefix: '/fwd', upstream: upstream.url, forward_authorization: true },
      { prefix: '/real-ip', upstream: upstream.url, pass_headers: ['X-Real-IP', 'Forwarded'] },
    ],
  },
})
const parent = await gw.createParent()
const keyId = await keyIdOf(gw, parent.id)
const identity: Identity = { resolved: parent.id, caller: parent.id, keyId, scopes: PARENT_SCOPES }
const auth: [string, string] = ['Authorization', `Bearer ${parent.apiKey}`]

/** One request as `parent`; returns the answer and what the upstream got (exactly one request). */
async function through(
  t: Test,
  what: string,
  options: { method?: string; path?: string; headers?: [string, string][]; body?: string },
): Promise<{ res: RawResponse; got: ReceivedRequest }> {
  const before = upstream.received.length
  const res = await rawRequest(gw.url, {
    method: options.method ?? 'GET',
    path: options.path ?? '/things/1',
    headers: [auth, ...(options.headers ?? [])],
    ...(options.body === undefined ? {} : { body: options.body }),
  })
  t.equal(res.status, 200, `${what}: 200 (${res.body.slice(0, 200)})`)
  t.equal(upstream.received.length, before + 1, `${what}: the upstream got it once`)
  const got =
    upstream.received[upstream.received.length - 1] ?? ({ headers: {}, rawHeaders: [] } as unknown as ReceivedRequest)
  return { res, got }
}

t.test('spoofed X-Service-* headers never arrive, in any case or count', async (t) => {
  const spoofs: [string, string][] = [
    ['X-SERVICE-RESOLVED-TENANT', 'evil-resolved'],
    ['x-Service-Key-Id', 'evil-key'],
    ['X-Service-Anything', 'evil-anything'],
    ['X-Service-Caller-Tenant', 'evil-caller-1'],
    ['X-Service-Caller-Tenant', 'evil-caller-2'],
    ['x-service-scopes', 'evil-admin'],
    ['X-Service-Scopes', 'evil-root'],
    ['x-service-resolved-tenant', 'evil-again'],
    ['X-Service-', 'evil-empty-suffix'],
    ['X-Service-Acting-Tenant', 'self'],
  ]
  for (const method of ['GET', 'POST', 'DELETE']) {
    const { res, got } = await through(t, method, {
      method,
      headers: method === 'POST' ? [...spoofs, ['Content-Type', 'text/plain'], ['Content-Length', '2']] : spoofs,
      ...(method === 'POST' ? { body: 'hi' } : {}),
    })
    checkIdentity(t, got, identity, method)
    t.notOk(
      got.rawHeaders.some((value) => value.includes('evil')),
      `${method}: no spoofed value anywhere in the upstream's raw headers`,
    )
    t.equal(got.headers['x-service-acting-tenant'], undefined, `${method}: the acting header itself is not forwarded`)
    t.equal(got.headers['x-request-id'], res.headers['x-request-id'], `${method}: the same request id`)
  }
})

t.test('lookalikes and method, path or address overrides never arrive', async (t) => {
  const lookalikes: [string, string][] = [
    ['X_Service_Resolved_Tenant', 'evil-underscores'],
    ['x-service_resolved-tenant', 'evil-mixed'],
    ['x.service.resolved.tenant', 'evil-dots'],
    ['X_SERVICE_KEY_ID', 'evil-key'],
  ]
  const overrides: [string, string][] = [
    ['X-HTTP-Method-Override', 'DELETE'],
    ['X-HTTP-Method', 'DELETE'],
    ['X-Method-Override', 'DELETE'],
    ['X-Original-Method', 'DELETE'],
    ['X-Original-URL', '/admin'],
    ['X-Rewrite-URL', '/admin'],
    ['Forwarded', 'for=10.0.0.1;host=evil'],
    ['X-Real-IP', '10.0.0.1'],
  ]
  const { got } = await through(t, 'GET', { headers: [...lookalikes, ...overrides] })
  checkIdentity(t, got, identity, 'GET')
  const names = [...rawNameCounts(got).keys()]
  for (const [name] of [...lookalikes, ...overrides]) {
    t.notOk(names.includes(name.toLowerCase()), `${name} is not forwarded`)
  }
  t.notOk(
    got.rawHeaders.some((value) => value.startsWith('evil') || value === 'DELETE' || value === '/admin'),
    "no such value anywhere in the upstream's raw headers",
  )
})

// CGI, WSGI and Rack read `_` and `.` as `-`: every spelling of every header the gateway drops or
// sets is dropped (its own value of the ones it sets still arrives, in the dash form).
t.test('every `-`/`_`/`.` spelling of a header the gateway drops or sets is dropped', async (t) => {
  const spellings = (name: string): string[] =>
    name
      .split('-')
      .reduce<string[]>(
        (heads, part, i) =>
          i === 0 ? [part] : heads.flatMap((head) => ['-', '_', '.'].map((sep) => head + sep + part)),
        [],
      )
  const dropped = [
    'X-HTTP-Method-Override',
    'X-HTTP-Method',
    'X-Method-Override',
    'X-Original-Method',
    'X-Original-URL',
    'X-Rewrite-URL',
    'X-Real-IP',
    'X-Request-Id',
    'X-Forwarded-Host',
    'X-Forwarded-Proto',
    'X-Forwarded-For',
    'Keep-Alive',
    'Proxy-Connection',
  ]
  let sent = 0
  for (const name of dropped) {
    // The dash form of the headers the gateway sets carries a value of the gateway's; only the
    // other spellings are forgeries here (the dash forms have tests of their own below).
    const forms = spellings(name).filter((form) => !(form === name && /^X-(Request-Id|Forwarded-)/.test(name)))
    const headers = forms.map((form, i): [string, string] => [form, `evil-${i}`])
    sent += headers.length
    const { got } = await through(t, `spellings of ${name}`, { headers })
    checkIdentity(t, got, identity, 'GET')
    const evil = got.rawHeaders.filter((value, i) => i % 2 === 1 && value.includes('evil'))
    t.same(evil, [], `no spelling of ${name} arrived (${forms.length} sent: ${forms.join(' ')})`)
  }
  t.ok(sent > 100, `${sent} spellings in all`)
})

t.test('a Host that is not host[:port] is 400 and never reaches the upstream', async (t) => {
  const badHosts = ['evil/v1/sub-accounts?a', 'a b', 'x@y', 'x#y', 'a:b:c', '[::1', 'x:123456', 'x:65536', 'x:99999']
  // No host, a port with no digits, a `%` that is not a percent-encoding (RFC 3986 §3.2.2).
  badHosts.push(':80', '', 'a:', 'a%zz', '%', 'a%2')
  for (const host of badHosts) {
    const before = upstream.received.length
    const res = await rawRequest(gw.url, { path: '/things/1', headers: [auth, ['Host', host]] })
    checkProblem(t, res, 400, 'bad_request', `Host ${JSON.stringify(host)}`)
    t.equal(upstream.received.length, before, `Host ${JSON.stringify(host)}: the upstream got nothing`)
  }
  for (const host of [
    'example.com',
    'example.com:8080',
    '127.0.0.1',
    '[::1]:8080',
    'x',
    'a-b.c_d~e',
    'x:65535',
    'x:08080',
    'a%2Fb',
  ]) {
    const { got } = await through(t, `Host ${host}`, { headers: [['Host', host]] })
    t.equal(got.headers['x-forwarded-host'], host, `Host ${host}: X-Forwarded-Host`)
  }
})

t.test(
  'an HTTP/1.1 request without Host is 400 in problem+json on every path; HTTP/1.0 may leave it out',
  async (t) => {
    for (const path of ['/things/1', '/v1/sub-accounts', '/healthz', '/nowhere']) {
      const before = upstream.received.length
      const res = await rawRequest(gw.url, { path, headers: [auth], withoutHost: true })
      const body = checkProblem(t, res, 400, 'bad_request', `no Host, ${path}`)
      t.match(String(body.detail), /Host/, `no Host, ${path}: the detail says what to send`)
      t.equal(upstream.received.length, before, `no Host, ${path}: the upstream got nothing`)
    }
    const http10 = await rawExchange(gw.port, `GET /things/1 HTTP/1.0\r\n${auth[0]}: ${auth[1]}\r\n\r\n`)
    t.equal(http10.responses[0]?.status, 200, 'HTTP/1.0 without Host: proxied')
    t.equal(upstream.received.at(-1)?.headers['x-forwarded-host'], undefined, 'HTTP/1.0: no X-Forwarded-Host')
  },
)

t.test('a route with pass_headers lets exactly those through', async (t) => {
  const { got } = await through(t, 'GET /real-ip', {
    path: '/real-ip/x',
    headers: [
      ['X-Real-IP', '198.51.100.4'],
      ['X_Real_IP', '198.51.100.5'],
      ['x.real.ip', '198.51.100.6'],
      ['Forwarded', 'for=198.51.100.4'],
      ['X-HTTP-Method-Override', 'DELETE'],
      ['X_HTTP_Method_Override', 'DELETE'],
      ['X_Service_Scopes', 'evil-scopes'],
    ],
  })
  t.equal(got.headers['x-real-ip'], '198.51.100.4', 'X-Real-IP arrives')
  t.equal(got.headers.x_real_ip, '198.51.100.5', 'named once in pass_headers, every spelling passes: X_Real_IP')
  t.equal(got.headers['x.real.ip'], '198.51.100.6', 'and x.real.ip')
  t.equal(got.headers.x_http_method_override, undefined, 'no spelling of an override the route does not name')
  t.equal(got.headers.forwarded, 'for=198.51.100.4', 'Forwarded arrives')
  t.equal(got.headers['x-http-method-override'], undefined, 'an override the route does not name is dropped')
  t.notOk(
    got.rawHeaders.some((value) => value === 'evil-scopes'),
    'a lookalike is dropped whatever the route says',
  )
})

t.test('a Connection header cannot remove the trusted headers (GHSA-gwhp-pf74-vj37)', async (t) => {
  const variants: [string, [string, string][]][] = [
    ['resolved, key id and request id', [['Connection', 'X-Service-Resolved-Tenant, x-service-key-id, x-request-id']]],
    ['caller and scopes, with close', [['Connection', 'close, X-Service-Scopes, X-Service-Caller-Tenant']]],
    [
      'all five, upper case',
      [
        [
          'Connection',
          'X-SERVICE-RESOLVED-TENANT, X-SERVICE-CALLER-TENANT, X-SERVICE-KEY-ID, X-SERVICE-SCOPES, X-REQUEST-ID',
        ],
      ],
    ],
    [
      'two Connection lines',
      [
        ['Connection', 'keep-alive'],
        ['Connection', 'x-service-resolved-tenant, x-service-scopes'],
      ],
    ],
    ['no spaces', [['Connection', 'x-service-key-id,x-service-caller-tenant,x-request-id']]],
    [
      'with a spoof of the named header',
      [
        ['Connection', 'x-service-key-id'],
        ['X-Service-Key-Id', 'evil-key'],
      ],
    ],
    ['the forwarding headers', [['Connection', 'x-forwarded-for, x-forwarded-proto, x-forwarded-host']]],
  ]
  for (const [what, headers] of variants) {
    const { res, got } = await through(t, what, { headers: [['X-Request-Id', 'conn-trick-1'], ...headers] })
    checkIdentity(t, got, identity, what)
    t.equal(got.headers['x-request-id'], 'conn-trick-1', `${what}: the client's sane request id arrives`)
    t.equal(res.headers['x-request-id'], 'conn-trick-1', `${what}: and is on the response`)
    t.equal(got.headers['x-forwarded-proto'], 'http', `${what}: X-Forwarded-Proto`)
    t.equal(got.headers['x-forwarded-for'], '127.0.0.1', `${what}: X-Forwarded-For`)
    t.ok(got.headers['x-forwarded-host'], `${what}: X-Forwarded-Host`)
    t.notMatch(
      String(got.headers.connection ?? ''),
      /x-service|x-request-id|x-forwarded/i,
      `${what}: the client's Connection tokens are not passed on`,
    )
    t.notOk(
      got.rawHeaders.some((value) => value.includes('evil')),
      `${what}: no spoofed value`,
    )
  }
})

t.test('Authorization is dropped unless the route forwards it', async (t) => {
  const plain = await through(t, 'catch-all', {})
  t.equal(plain.got.headers.authorization, undefined, 'not forwarded by default')
  t.notOk(rawNameCounts(plain.got).has('authorization'), 'in no spelling')
  const forwarded = await through(t, 'forward_authorization route', { path: '/fwd/x' })
  t.equal(
    forwarded.got.headers.authorization,
    `Bearer ${parent.apiKey}`,
    'forwarded on a route with forward_authorization: true',
  )
  t.equal(rawNameCounts(forwarded.got).get('authorization'), 1, 'once')
  t.equal(forwarded.got.url, '/fwd/x')
  checkIdentity(t, forwarded.got, identity, 'forward_authorization route')
})

t.test('X-Request-Id: kept when sane, replaced when not, the same on the response', async (t) => {
  for (const sane of ['abc', 'req-1.2:3_ABC', 'x'.repeat(128), '0']) {
    const { res, got } = await through(t, `sane ${sane.slice(0, 20)}`, { headers: [['X-Request-Id', sane]] })
    t.equal(got.headers['x-request-id'], sane, `kept: ${sane.slice(0, 20)}`)
    t.equal(res.headers['x-request-id'], sane, `on the response: ${sane.slice(0, 20)}`)
  }
  const insane: [string, [string, string][]][] = [
    ['absent', []],
    ['empty', [['X-Request-Id', '']]],
    ['with a space', [['X-Request-Id', 'has space']]],
    ['with a slash', [['X-Request-Id', 'a/b']]],
    ['129 characters', [['X-Request-Id', 'x'.repeat(129)]]],
    ['with a quote', [['X-Request-Id', 'a"b']]],
    [
      'sent twice',
      [
        ['X-Request-Id', 'one'],
        ['X-Request-Id', 'two'],
      ],
    ],
  ]
  for (const [what, headers] of insane) {
    const { res, got } = await through(t, what, { headers })
    const id = got.headers['x-request-id']
    t.match(String(id), UUID_V4ISH, `${what}: replaced by a generated id`)
    t.equal(res.headers['x-request-id'], id, `${what}: the same id on the response`)
    t.equal(rawNameCounts(got).get('x-request-id'), 1, `${what}: once`)
  }
  // A refusal carries the client's id too.
  const refused = await rawRequest(gw.url, { path: '/things/1', headers: [['X-Request-Id', 'refused-1']] })
  t.equal(refused.status, 401)
  t.equal(refused.headers['x-request-id'], 'refused-1', 'a refusal answers with the request id')
  t.equal(refused.json().request_id, 'refused-1', 'and names it in the problem')
})

t.test('X-Forwarded-For is appended, -Proto and -Host are set', async (t) => {
  const bare = await through(t, 'no forwarding headers', {})
  t.equal(bare.got.headers['x-forwarded-for'], '127.0.0.1', 'X-Forwarded-For: the peer')
  t.equal(bare.got.headers['x-forwarded-proto'], 'http', 'X-Forwarded-Proto')
  t.equal(bare.got.headers['x-forwarded-host'], new URL(gw.url).host, 'X-Forwarded-Host: the Host the client asked for')
  t.equal(bare.got.headers.host, new URL(upstream.url).host, "Host: the upstream's own")

  const chained = await through(t, 'a client chain', {
    headers: [
      ['Host', 'shop.example.test:8443'],
      ['X-Forwarded-For', '203.0.113.7'],
      ['X-Forwarded-Proto', 'https'],
      ['X-Forwarded-Host', 'evil.example.test'],
    ],
  })
  t.equal(chained.got.headers['x-forwarded-for'], '203.0.113.7, 127.0.0.1', 'appended to the client chain')
  t.equal(chained.got.headers['x-forwarded-proto'], 'http', 'the gateway says how it was reached')
  t.equal(
    chained.got.headers['x-forwarded-host'],
    'shop.example.test:8443',
    'the Host the client sent, not its X-Forwarded-Host',
  )
  t.equal(rawNameCounts(chained.got).get('x-forwarded-host'), 1, 'one X-Forwarded-Host')
  t.equal(rawNameCounts(chained.got).get('x-forwarded-proto'), 1, 'one X-Forwarded-Proto')
  t.equal(rawNameCounts(chained.got).get('x-forwarded-for'), 1, 'one X-Forwarded-For')

  const twice = await through(t, 'X-Forwarded-For twice', {
    headers: [
      ['X-Forwarded-For', '198.51.100.1'],
      ['X-Forwarded-For', '203.0.113.7'],
    ],
  })
  t.equal(
    twice.got.headers['x-forwarded-for'],
    '198.51.100.1, 203.0.113.7, 127.0.0.1',
    'both lines kept, in order, then the peer',
  )
})

t.test('hop-by-hop headers are not forwarded; end-to-end ones are', async (t) => {
  const { got } = await through(t, 'hop-by-hop', {
    headers: [
      ['Keep-Alive', 'timeout=5, max=100'],
      ['TE', 'trailers'],
      ['Upgrade', 'h2c'],
      ['Proxy-Authorization', 'Basic c2VjcmV0OnNlY3JldA=='],
      ['Proxy-Connection', 'keep-alive'],
      ['X-Custom', 'kept'],
      ['Accept', 'text/plain'],
      ['Cookie', 'a=1'],
    ],
  })
  for (const name of ['keep-alive', 'te', 'upgrade', 'proxy-authorization', 'proxy-connection', 'trailer']) {
    t.notOk(rawNameCounts(got).has(name), `${name} not forwarded`)
  }
  t.notOk(
    got.rawHeaders.some((value) => value.includes('c2VjcmV0')),
    'the proxy credentials appear nowhere',
  )
  t.equal(got.headers['x-custom'], 'kept', 'a custom header is forwarded')
  t.equal(got.headers.accept, 'text/plain', 'Accept is forwarded')
  t.equal(got.headers.cookie, 'a=1', 'Cookie is forwarded')

  // Trailer needs a chunked body (node's client refuses it otherwise).
  const chunked = await through(t, 'Trailer on a chunked POST', {
    method: 'POST',
    headers: [
      ['Transfer-Encoding', 'chunked'],
      ['Trailer', 'X-Checksum'],
      ['Content-Type', 'text/plain'],
    ],
    body: 'chunked body',
  })
  t.notOk(rawNameCounts(chunked.got).has('trailer'), 'trailer not forwarded')
  t.equal(chunked.got.bodySha256, sha256('chunked body'), 'the body still arrives')
})

t.test('the query string arrives byte for byte', async (t) => {
  const targets = [
    '/things/1?b=2&a=1&a=%20x&flag',
    '/things/1?q=a+b&t=%7e&u=%C3%A9&&empty=&=&x=1?y',
    '/things/1?',
    '/things/1?%7Bodd%7D=%2B%2b&z',
    '/fwd/deep/er?b=2&a=1&a=%20x&flag',
  ]
  for (const path of targets) {
    const { got } = await through(t, path, { path })
    t.equal(got.url, path, `unchanged: ${path}`)
  }
})
