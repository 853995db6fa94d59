// No service worker through the proxy (docs/api.md, Proxied requests and "What comes back"), over
// real sockets against a real upstream: a browser's fetch of a worker's script (`Service-Worker:
// script`, which no page can set) is 403 service_worker_refused on every route, public, keyed,
// WebSocket and catch-all, before the key is asked for and before any upstream hears of it; and an
// upstream's `Service-Worker-Allowed` never reaches the client, so that no worker of a route's path
// could take a scope above it (the console and the portal share the origin). The attack it closes
// registered /public/sw.js for scope `/` from a public route's page.
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { rawRequest } from '../helpers/http.js'
import { checkProblem } from '../helpers/problems.js'
import { startUpstream } from '../helpers/upstream.js'

// The attacker's upstream: a worker script that asks for scope `/`, in every spelling of the header.
const upstream = await startUpstream(t, (request, response) => {
  const allowed = new URL(request.url!, 'http://upstream').searchParams.get('allowed')
  response.setHeader('content-type', 'text/javascript')
  response.setHeader('x-other', 'kept')
  if (allowed === 'twice') response.setHeader('Service-Worker-Allowed', ['/', '/console'])
  else if (allowed === 'upper') response.setHeader('SERVICE-WORKER-ALLOWED', '/')
  else response.setHeader('service-worker-allowed', '/')
  response.end("self.addEventListener('fetch', () => {})")
})

const gw = await startGateway(t, {
  gatewayConfig: {
    routes: [
      { prefix: '/public', upstream: upstream.url, public: true },
      { prefix: '/api', upstream: upstream.url, scopes: { read: ['api:read'] } },
      { prefix: '/live', upstream: upstream.url, websocket: true },
      { prefix: '/', upstream: upstream.url, public: true },
    ],
  },
})
const parent = await gw.createParent({ scopes: ['sub_accounts:read', 'api:read'] })
const key: [string, string] = ['Authorization', `Bearer ${parent.apiKey}`]

t.test("a worker's script fetch is refused on every route, before its key and its upstream", async (t) => {
  const before = upstream.received.length
  const cases: [string, [string, string][]][] = [
    ['/public/sw.js', [['Service-Worker', 'script']]],
    ['/public/sw.js?v=2', [['service-worker', 'script']]],
    ['/public/deep/sw.js', [['SERVICE-WORKER', 'Script']]],
    ['/api/sw.js', [['Service-Worker', 'script']]],
    ['/api/sw.js', [['Service-Worker', 'script'], key]],
    ['/live/sw.js', [['Service-Worker', 'script'], key]],
    ['/sw.js', [['Service-Worker', 'script']]],
    // Whatever its value: `script` is the only one a browser sends, and nothing else sends it.
    ['/public/sw.js', [['Service-Worker', '']]],
    ['/public/sw.js', [['Service-Worker', 'module']]],
  ]
  for (const [path, headers] of cases) {
    const what = `${path} with ${headers.map(([n, v]) => `${n}: ${v}`).join(', ')}`
    const res = await rawRequest(gw.url, { path, headers })
    const body = checkProblem(t, res, 403, 'service_worker_refused', what)
    t.match(String(body.detail), /service worker/, `${what}: says why`)
  }
  t.equal(upstream.received.length, before, 'no upstream heard of any of them')
})

t.test('the same paths without the header reach the upstream, Service-Worker-Allowed taken off', async (t) => {
  for (const [path, headers] of [
    ['/public/sw.js', []],
    ['/public/sw.js?allowed=twice', []],
    ['/public/sw.js?allowed=upper', []],
    ['/api/sw.js', [key]],
    ['/live/sw.js', [key]],
    ['/sw.js', []],
  ] as [string, [string, string][]][]) {
    const res = await rawRequest(gw.url, { path, headers })
    t.equal(res.status, 200, `${path}: proxied`)
    t.equal(res.headers['service-worker-allowed'], undefined, `${path}: no Service-Worker-Allowed`)
    t.equal(res.headers['x-other'], 'kept', `${path}: the upstream's other headers pass`)
    t.match(res.body, /addEventListener/, `${path}: the body passes`)
  }
})
