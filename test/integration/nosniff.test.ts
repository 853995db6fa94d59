// X-Content-Type-Options: nosniff on every answer the gateway writes itself (docs/api.md, Headers),
// over real sockets: the management API, the portal's API, the token endpoint, the operations
// paths and every refusal, a proxied route's too; never added to a proxied answer, which keeps
// whatever its upstream sent.
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { rawRequest } from '../helpers/http.js'
import { startUpstream } from '../helpers/upstream.js'

// `?nosniff=1`: the upstream says it itself; else it does not.
const upstream = await startUpstream(t, (request, response) => {
  const own = request.url!.includes('nosniff=1')
  response.writeHead(200, {
    'content-type': 'application/json',
    ...(own ? { 'x-content-type-options': 'nosniff' } : {}),
  })
  response.end('{}')
})
const gw = await startGateway(t, {
  gatewayConfig: {
    routes: [
      { prefix: '/public', upstream: upstream.url, public: true },
      { prefix: '/api', upstream: upstream.url, scopes: { read: ['api:read'] } },
      { prefix: '/down', upstream: 'http://127.0.0.1:9', public: true },
    ],
  },
})
const parent = await gw.createParent({ scopes: ['sub_accounts:read', 'sub_accounts:write', 'api:read'] })
const key: [string, string] = ['Authorization', `Bearer ${parent.apiKey}`]
const json: [string, string] = ['Content-Type', 'application/json']

t.test("the gateway's own answers are never sniffed", async (t) => {
  const cases: [string, { method?: string; path: string; headers?: [string, string][]; body?: string }, number][] = [
    ['a management read', { path: '/v1/sub-accounts', headers: [key] }, 200],
    [
      'a management write',
      {
        method: 'POST',
        path: '/v1/sub-accounts',
        headers: [key, json, ['X-Service-Acting-Tenant', 'self']],
        body: '{"name":"a"}',
      },
      201,
    ],
    ['a management refusal', { path: '/v1/sub-accounts' }, 401],
    [
      'a management body that is not JSON',
      {
        method: 'POST',
        path: '/v1/sub-accounts',
        headers: [key, json, ['X-Service-Acting-Tenant', 'self']],
        body: '{',
      },
      400,
    ],
    ['the portal API', { path: '/portal/api/session' }, 401],
    ['the portal page', { path: '/portal/' }, 200],
    ['the console', { path: '/console' }, 200],
    [
      'the token endpoint',
      {
        method: 'POST',
        path: '/oauth2/token',
        headers: [['Content-Type', 'application/x-www-form-urlencoded']],
        body: 'grant_type=client_credentials',
      },
      401,
    ],
    ['the token metadata', { path: '/.well-known/oauth-authorization-server' }, 200],
    ['the signing keys', { path: '/.well-known/jwks.json' }, 200],
    ['healthz', { path: '/healthz' }, 200],
    ['readyz', { path: '/readyz' }, 200],
    ['the OpenAPI document', { path: '/openapi.json' }, 200],
    ['an unknown path', { path: '/nowhere' }, 404],
    ['a refused path', { path: '/public/a/../b' }, 400],
    ["a proxied route's refusal", { path: '/api/x' }, 401],
    ["a proxied route's 502", { path: '/down/x' }, 502],
  ]
  for (const [what, request, status] of cases) {
    const res = await rawRequest(gw.url, request)
    t.equal(res.status, status, `${what}: ${status}`)
    t.equal(res.headers['x-content-type-options'], 'nosniff', `${what}: nosniff`)
  }
})

t.test("a proxied answer keeps the upstream's headers: nosniff only when it sent it", async (t) => {
  for (const [path, headers] of [
    ['/public/x', []],
    ['/api/x', [key]],
  ] as [string, [string, string][]][]) {
    const bare = await rawRequest(gw.url, { path, headers })
    t.equal(bare.status, 200, `${path}: proxied`)
    t.equal(bare.headers['x-content-type-options'], undefined, `${path}: none added`)
    const own = await rawRequest(gw.url, { path: `${path}?nosniff=1`, headers })
    t.equal(own.headers['x-content-type-options'], 'nosniff', `${path}: the upstream's own passes`)
  }
})
