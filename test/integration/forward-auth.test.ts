// Forward authorization (docs/forward-auth.md): AUTHZ_PORT answers /nginx, /forward-auth,
// /envoy/<path> and POST /verify with the proxy's own decision, and nothing else; PORT never
// answers them. Asked directly here, over real sockets, against the answers PORT gives the same
// request: status, problem body, WWW-Authenticate, Retry-After and RateLimit fields alike. The
// proxies in front (nginx, Caddy) are in forward-auth-proxies.test.ts.
import { request as httpRequest } from 'node:http'
import { connect } from 'node:net'
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { callAs, type RawResponse, rawRequest } from '../helpers/http.js'
import { listenForDecisions } from '../../src/forward-auth/listener.js'
import { monthOf } from '../../src/limits/month.js'
import { monthUse } from '../../src/limits/store.js'
import { sleep, until } from '../helpers/poll.js'
import { holdingUpstream, startUpstream } from '../helpers/upstream.js'

const upstream = await startUpstream(t)
const holding = await holdingUpstream(t, { holdPrefix: '/v1/narrow/hold', delayMs: [0, 0] })
const gw = await startGateway(t, {
  authz: true,
  requestLog: { flushIntervalMs: 50 },
  gatewayConfig: {
    routes: [
      { prefix: '/v1/things', upstream: upstream.url, scopes: { read: ['things:read'], write: ['things:write'] } },
      // Only decided for: no upstream.
      { prefix: '/v1/decided', scopes: { read: ['things:read'] } },
      // Called from browsers on another origin: PORT answers its preflights.
      {
        prefix: '/v1/browser',
        upstream: upstream.url,
        scopes: { read: ['things:read'] },
        cors: { origins: ['https://app.example.com'], methods: ['GET'] },
      },
      { prefix: '/v1/costly', upstream: upstream.url, cost: 5 },
      { prefix: '/v1/signed', upstream: upstream.url, identity: { audience: 'signed-things' } },
      // Cells: a tenant placed nowhere is in the default cell.
      { prefix: '/v1/celled', cells: { eu: { targets: [{ url: upstream.url }] } }, default_cell: 'eu' },
      // One slot in all: one request held upstream takes it.
      {
        prefix: '/v1/narrow',
        upstream: holding.url,
        max_connections: 1,
        max_connections_per_tenant: 1,
        max_connections_per_account: 1,
      },
    ],
  },
})
const parent = await gw.createParent({ scopes: ['sub_accounts:read', 'sub_accounts:write', 'things:read'] })

async function subAccount(name: string, requests: number): Promise<string> {
  const res = await callAs(gw.url, parent.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts',
    acting: 'self',
    json: { name, limits: { rate: { requests, per_seconds: 600 } } },
  })
  if (res.status !== 201) throw new Error(`create ${name}: ${res.status} ${res.body}`)
  return res.json().id as string
}

/** The request `path` as each endpoint is asked about it, with the client's own headers. */
function ask(
  endpoint: 'nginx' | 'forward-auth' | 'envoy',
  method: string,
  path: string,
  headers: [string, string][],
): Promise<RawResponse> {
  if (endpoint === 'nginx')
    return rawRequest(gw.authzUrl, {
      path: '/nginx',
      headers: [['X-Original-Method', method], ['X-Original-URI', path], ...headers],
    })
  if (endpoint === 'forward-auth')
    return rawRequest(gw.authzUrl, {
      path: '/forward-auth',
      headers: [
        ['X-Forwarded-Method', method],
        ['X-Forwarded-Uri', path],
        ['X-Forwarded-Host', 'api.example.com'],
        ['X-Forwarded-Proto', 'https'],
        ...headers,
      ],
    })
  return rawRequest(gw.authzUrl, { method, path: `/envoy${path}`, headers })
}

const bearer = (key: string): [string, string] => ['Authorization', `Bearer ${key}`]
const problemOf = (res: RawResponse) => {
  const { request_id: _id, ...rest } = JSON.parse(res.body) as Record<string, unknown>
  return rest
}

t.test('an allowed request: 200 with the trusted headers, on each endpoint', async (t) => {
  for (const endpoint of ['nginx', 'forward-auth', 'envoy'] as const) {
    const res = await ask(endpoint, 'GET', '/v1/things/a?x=1', [
      bearer(parent.apiKey),
      ['X-Request-Id', `req-${endpoint}`],
    ])
    t.equal(res.status, 200, endpoint)
    t.equal(res.headers['x-service-resolved-tenant'], parent.id, `${endpoint}: resolved tenant`)
    t.equal(res.headers['x-service-caller-tenant'], parent.id)
    t.equal(res.headers['x-service-key-id'], parent.keyId)
    t.match(res.headers['x-service-scopes'], /things:read/)
    t.equal(res.headers['x-request-id'], `req-${endpoint}`)
    t.equal(res.body, '')
  }
  t.equal(upstream.received.length, 0, 'nothing was proxied')
})

t.test("each refusal is the proxy's: status, body and headers; nginx gets it as 401 or 403", async (t) => {
  const cases: { name: string; method: string; path: string; headers: [string, string][] }[] = [
    { name: 'no key', method: 'GET', path: '/v1/things/a', headers: [] },
    { name: 'unknown key', method: 'GET', path: '/v1/things/a', headers: [bearer(`tgw_${'x'.repeat(40)}`)] },
    { name: 'missing scope', method: 'POST', path: '/v1/things/a', headers: [bearer(parent.apiKey)] },
    { name: 'no route', method: 'GET', path: '/nowhere', headers: [bearer(parent.apiKey)] },
    {
      name: 'an upgrade where no WebSocket is carried',
      method: 'GET',
      path: '/v1/things/a',
      headers: [bearer(parent.apiKey), ['Upgrade', 'websocket']],
    },
    { name: 'bad path', method: 'GET', path: '/v1/things/../x', headers: [bearer(parent.apiKey)] },
    {
      name: 'acting malformed',
      method: 'GET',
      path: '/v1/things/a',
      headers: [bearer(parent.apiKey), ['X-Service-Acting-Tenant', 'nobody']],
    },
  ]
  for (const c of cases) {
    const proxied = await callAs(gw.url, null, { method: c.method, path: c.path, headers: c.headers })
    t.ok(proxied.status >= 400, `${c.name}: refused through the proxy (${proxied.status})`)
    for (const endpoint of ['forward-auth', 'envoy'] as const) {
      const decided = await ask(endpoint, c.method, c.path, c.headers)
      t.equal(decided.status, proxied.status, `${c.name}, ${endpoint}: same status`)
      t.same(problemOf(decided), problemOf(proxied), `${c.name}, ${endpoint}: same problem`)
      t.equal(
        decided.headers['www-authenticate'],
        proxied.headers['www-authenticate'],
        `${c.name}: same WWW-Authenticate`,
      )
      t.match(decided.headers['content-type'], /application\/problem\+json/)
    }
    const nginx = await ask('nginx', c.method, c.path, c.headers)
    t.equal(nginx.status, proxied.status === 401 ? 401 : 403, `${c.name}, nginx: 401 or 403`)
    t.equal(nginx.headers['x-tgw-status'], String(proxied.status), `${c.name}, nginx: the real status`)
    t.same(
      problemOf({ ...nginx, body: String(nginx.headers['x-tgw-problem']) }),
      problemOf(proxied),
      `${c.name}, nginx: the problem on one line`,
    )
  }
  t.equal(upstream.received.length, 0, 'nothing was proxied')
})

t.test('a limit refuses a decision as it refuses a proxied request: 429, Retry-After, RateLimit', async (t) => {
  const sub = await subAccount('one-a-while', 2)
  const asSub: [string, string][] = [bearer(parent.apiKey), ['X-Service-Acting-Tenant', sub]]
  const first = await ask('envoy', 'GET', '/v1/things/a', asSub)
  t.equal(first.status, 200)
  t.match(first.headers['ratelimit-policy'], /"sub_account.rate";q=2;w=600/)
  t.equal(first.headers['x-service-resolved-tenant'], sub)
  // A small limit leases a unit at a time (limits-proxy.test.ts): a pause lets the renewal land.
  await sleep(150)
  t.equal(
    (await callAs(gw.url, parent.apiKey, { path: '/v1/things/a', acting: sub })).status,
    200,
    'the proxy takes the second',
  )
  await sleep(150)
  const proxied = await callAs(gw.url, parent.apiKey, { path: '/v1/things/a', acting: sub })
  t.equal(proxied.status, 429)
  for (const endpoint of ['forward-auth', 'envoy'] as const) {
    const decided = await ask(endpoint, 'GET', '/v1/things/a', asSub)
    t.equal(decided.status, 429, endpoint)
    t.ok(Number(decided.headers['retry-after']) >= 1, `${endpoint}: Retry-After`)
    t.same(problemOf(decided).violated_policies, ['sub_account.rate'])
    t.equal(decided.headers['ratelimit-policy'], proxied.headers['ratelimit-policy'])
  }
  const nginx = await ask('nginx', 'GET', '/v1/things/a', asSub)
  t.equal(nginx.status, 403)
  t.equal(nginx.headers['x-tgw-status'], '429')
  t.ok(Number(nginx.headers['retry-after']) >= 1, 'nginx: Retry-After')
  t.same(JSON.parse(String(nginx.headers['x-tgw-problem'])).code, 'rate_limited')
})

t.test('POST /verify', async (t) => {
  const verify = (body: unknown) =>
    rawRequest(gw.authzUrl, {
      method: 'POST',
      path: '/verify',
      headers: [['Content-Type', 'application/json']],
      body: JSON.stringify(body),
    })
  const valid = await verify({ key: parent.apiKey, path: '/v1/things/a' })
  t.equal(valid.status, 200)
  t.same(valid.json(), {
    valid: true,
    key_id: parent.keyId,
    caller_tenant_id: parent.id,
    resolved_tenant_id: parent.id,
    scopes: ['sub_accounts:read', 'sub_accounts:write', 'things:read'],
    ratelimit: null,
  })
  t.same((await verify({ key: 'tgw_nope', path: '/v1/things/a' })).json(), {
    valid: false,
    code: 'unauthenticated',
    status: 401,
  })
  t.same((await verify({ key: parent.apiKey, acting_tenant: 'self', method: 'POST', path: '/v1/things/a' })).json(), {
    valid: false,
    code: 'insufficient_scope',
    status: 403,
  })
  const sub = await subAccount('verified', 5)
  const acting = await verify({ key: parent.apiKey, acting_tenant: sub, path: '/v1/costly/x', cost: 2 })
  t.equal(acting.json().resolved_tenant_id, sub)
  t.match(
    acting.json().ratelimit,
    { policy: '"sub_account.rate";q=5;w=600', current: /^"sub_account.rate";r=3;/ },
    'cost 2 taken of 5',
  )
  const bad = await verify({ key: parent.apiKey, cost: 0, extra: true })
  t.equal(bad.status, 400)
  t.equal(bad.json().code, 'validation_failed')
  t.same(
    bad.json().errors.map((e: { path: string }) => e.path),
    ['/extra', '/cost'],
  )
  t.equal((await rawRequest(gw.authzUrl, { method: 'POST', path: '/verify', body: '{' })).json().code, 'invalid_json')
  t.equal((await rawRequest(gw.authzUrl, { path: '/verify' })).status, 404, 'POST only')
})

t.test('a CORS preflight is never an allow: decided as any request, it needs a key', async (t) => {
  const preflight: [string, string][] = [
    ['Origin', 'https://app.example.com'],
    ['Access-Control-Request-Method', 'GET'],
  ]
  const onPort = await rawRequest(gw.url, { method: 'OPTIONS', path: '/v1/browser/a', headers: preflight })
  t.equal(onPort.status, 204, 'PORT answers it itself')
  const received = upstream.received.length
  // A 2xx is "allow" to the asking proxy, which would send the preflight on, keyless, to its upstream.
  for (const endpoint of ['nginx', 'forward-auth', 'envoy'] as const) {
    const keyless = await ask(endpoint, 'OPTIONS', '/v1/browser/admin/export?all=1', preflight)
    t.equal(keyless.status, 401, `${endpoint}: a keyless preflight is refused as a keyless request is`)
    t.equal(keyless.headers['x-tgw-status'], endpoint === 'nginx' ? '401' : undefined, `${endpoint}: its real status`)
    t.equal(keyless.headers['access-control-allow-methods'], undefined, `${endpoint}: no preflight answer`)
    t.equal(keyless.headers['access-control-allow-origin'], 'https://app.example.com', 'a refusal says who may read it')
    const keyed = await ask(endpoint, 'OPTIONS', '/v1/browser/a', [...preflight, bearer(parent.apiKey)])
    t.equal(keyed.status, 200, `${endpoint}: with a key, an OPTIONS is allowed as any request of its scope`)
    t.equal(keyed.headers['x-service-resolved-tenant'], parent.id)
  }
  t.equal(upstream.received.length, received, 'nothing was proxied')
})

t.test('AUTHZ_PORT serves only its endpoints; PORT never decides', async (t) => {
  for (const path of ['/v1/things/a', '/healthz', '/openapi.json', '/v1/sub-accounts', '/nginxx', '/']) {
    const res = await callAs(gw.authzUrl, parent.apiKey, { path })
    t.equal(res.status, 404, `AUTHZ_PORT ${path}`)
    t.equal(res.json().code, 'route_not_found')
  }
  // Asked about the gateway's own paths: never decided, never run.
  for (const path of ['/v1/sub-accounts', '/healthz', '/oauth2/token', '/console']) {
    const res = await ask('envoy', 'GET', path, [bearer(parent.apiKey)])
    t.equal(res.status, 404, `a decision about ${path}`)
    t.equal(res.json().code, 'route_not_found')
  }
  // On PORT, the endpoints' paths are paths like any other (no route: 404), and a route only
  // decided for is no route at all.
  for (const path of ['/nginx', '/forward-auth', '/envoy/v1/things/a', '/verify', '/v1/decided/x']) {
    const res = await callAs(gw.url, parent.apiKey, {
      path,
      headers: [
        ['X-Original-URI', '/v1/things/a'],
        ['X-Original-Method', 'GET'],
      ],
    })
    t.equal(res.status, 404, `PORT ${path}`)
    t.equal(res.json().code, 'route_not_found')
    t.notOk(res.headers['x-service-resolved-tenant'])
  }
  const decided = await ask('envoy', 'GET', '/v1/decided/x', [bearer(parent.apiKey)])
  t.equal(decided.status, 200, 'a route without an upstream is decided for')
  t.equal(decided.headers['x-service-key-id'], parent.keyId)
})

t.test('a decision counts as the proxy counts: usage, quota and the request log, outcome decided', async (t) => {
  const made = await callAs(gw.url, parent.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts',
    acting: 'self',
    json: { name: 'counted', limits: { monthly_quota: { requests: 12 } } },
  })
  const sub = made.json().id as string
  const asSub: [string, string][] = [bearer(parent.apiKey), ['X-Service-Acting-Tenant', sub]]
  const proxiedBefore = upstream.received.length
  t.equal((await ask('envoy', 'GET', '/v1/costly/1', asSub)).status, 200)
  t.equal((await ask('forward-auth', 'GET', '/v1/costly/2', asSub)).status, 200)
  // 10 of 12 units taken: a third of cost 5 is over the quota; nginx hears 403, the log the 429.
  const refused = await ask('nginx', 'GET', '/v1/costly/3', asSub)
  t.equal(refused.status, 403)
  t.equal(refused.headers['x-tgw-status'], '429')
  t.equal(upstream.received.length, proxiedBefore, 'nothing was proxied')

  await gw.app.usageMeter.flush()
  t.equal(
    await monthUse(gw.sql, { tenantId: sub, level: 'sub_account' }, monthOf(Date.now())),
    10,
    'the quota counts 2 × 5',
  )
  const usage = await callAs(gw.url, parent.apiKey, { path: `/v1/sub-accounts/usage?sub_account_id=${sub}` })
  const [entry] = usage.json().data
  t.equal(entry.requests, 3, 'three decisions answered')
  t.same(entry.units, { requests: 10 }, 'the two allowed count their cost')
  t.same(entry.by_status, { '2xx': 2, '3xx': 0, '4xx': 1, '5xx': 0 })

  let records: { status: number; outcome: string; path: string; route: string }[] = []
  t.ok(
    await until(10_000, async () => {
      const page = await callAs(gw.url, parent.apiKey, { path: `/v1/sub-accounts/requests?sub_account_id=${sub}` })
      records = page.json().data
      return records.length === 3
    }),
    'the request log holds the three',
  )
  t.same(records.map((r) => [r.path, r.status, r.outcome, r.route]).sort(), [
    ['/v1/costly/1', 200, 'decided', '/v1/costly'],
    ['/v1/costly/2', 200, 'decided', '/v1/costly'],
    ['/v1/costly/3', 429, 'decided', '/v1/costly'],
  ])
})

t.test('the concurrency caps do not apply to a decision: it takes no upstream slot', async (t) => {
  const inFlight = callAs(gw.url, parent.apiKey, { path: '/v1/narrow/hold' })
  t.ok(await until(10_000, async () => holding.held() === 1), 'a proxied request holds the only slot')
  const refused = await callAs(gw.url, parent.apiKey, { path: '/v1/narrow/x' })
  t.equal(refused.status, 429, 'through the proxy, the tenant has no share left')
  t.equal(refused.json().code, 'too_many_concurrent_requests')
  const decided = await ask('envoy', 'GET', '/v1/narrow/x', [bearer(parent.apiKey)])
  t.equal(decided.status, 200, 'decided all the same')
  holding.release()
  t.equal((await inFlight).status, 200)
})

t.test("a question carrying the client's Expect: 100-continue gets the decision, no 100 before it", async (t) => {
  const informational: number[] = []
  const status = await new Promise<number>((resolve, reject) => {
    const url = new URL(gw.authzUrl)
    const request = httpRequest(
      {
        host: url.hostname,
        port: url.port,
        path: '/envoy/v1/things/a',
        headers: { authorization: `Bearer ${parent.apiKey}`, expect: '100-continue' },
        agent: false,
      },
      (response) => {
        response.resume()
        response.on('end', () => resolve(response.statusCode!))
      },
    )
    request.on('information', (info) => informational.push(info.statusCode))
    request.on('error', reject)
    request.end()
  })
  t.equal(status, 200)
  t.same(informational, [], 'no 100 Continue: Envoy or Traefik would take it for the answer')
})

t.test('AUTHZ_PORT holds at most MAX_CONNECTIONS: past them, with none idle, a connection is closed', async (t) => {
  const listener = await listenForDecisions(gw.app, 0, '127.0.0.1', 2)
  t.teardown(() => listener.close())
  // Two heads still arriving: held, and not idle.
  const held = [0, 1].map(() => connect(listener.port, '127.0.0.1'))
  t.teardown(() => {
    for (const socket of held) socket.destroy()
  })
  for (const socket of held) {
    socket.on('error', () => {})
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()))
    socket.write('GET /envoy/v1/things/a HTTP/1.1\r\nHost: a\r\n')
  }
  t.ok(
    await until(10_000, async () => {
      const count = await new Promise<number>((resolve) => listener.server.getConnections((_err, n) => resolve(n)))
      return count === 2
    }),
    'both held',
  )
  await t.rejects(
    rawRequest(`http://127.0.0.1:${listener.port}`, { path: '/envoy/v1/things/a', headers: [bearer(parent.apiKey)] }),
    'a third is closed unanswered',
  )
  for (const socket of held) socket.destroy()
  t.ok(
    await until(10_000, async () => {
      try {
        const res = await rawRequest(`http://127.0.0.1:${listener.port}`, {
          path: '/envoy/v1/things/a',
          headers: [bearer(parent.apiKey)],
        })
        return res.status === 200
      } catch {
        return false
      }
    }),
    'served again once they are gone',
  )
})

t.test('an app built without AUTHZ_PORT is never handed decisions', async (t) => {
  const plain = await startGateway(t, { listen: false })
  await t.rejects(listenForDecisions(plain.app, 0, '127.0.0.1'), /built without AUTHZ_PORT/)
})

t.test('on a route that signs, the decision carries X-Service-Identity, as the upstream would get it', async (t) => {
  const decided = await ask('nginx', 'GET', '/v1/signed/a', [bearer(parent.apiKey)])
  t.equal(decided.status, 200)
  const token = String(decided.headers['x-service-identity'])
  const claims = JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8'))
  t.match(claims, { aud: 'signed-things', sub: parent.id, key_id: parent.keyId })
  t.notOk(
    (await ask('nginx', 'GET', '/v1/things/a', [bearer(parent.apiKey)])).headers['x-service-identity'],
    'none elsewhere',
  )
})

t.test('on a route with cells, the decision carries X-Service-Cell, for the proxy to route by', async (t) => {
  for (const endpoint of ['nginx', 'forward-auth', 'envoy'] as const) {
    const decided = await ask(endpoint, 'GET', '/v1/celled/a', [bearer(parent.apiKey)])
    t.equal(decided.status, 200, endpoint)
    t.equal(decided.headers['x-service-cell'], 'eu', `${endpoint}: the tenant's cell`)
  }
  t.notOk(
    (await ask('nginx', 'GET', '/v1/things/a', [bearer(parent.apiKey)])).headers['x-service-cell'],
    'none elsewhere',
  )
})
