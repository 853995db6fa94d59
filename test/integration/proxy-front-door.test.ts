// The proxy's front door (src/proxy/front-door.ts) against fastify's own path, over real sockets:
// two gateways on one database and one upstream, one with the door and one without, get the
// same requests and must answer them alike (status, headers, body, what the upstream received,
// the metrics by kind). The door must have served exactly the requests it may take, and
// declined the rest to fastify.
import t from 'tap'
import { request } from 'undici'
import { ROUTE_KINDS } from '../../src/http/route-kind.js'
import { metricValue, startGateway, type TestGateway } from '../helpers/gateway.js'
import { startUpstream } from '../helpers/upstream.js'

const upstream = await startUpstream(t)
const gatewayConfig = {
  routes: [
    { prefix: '/v1/things', upstream: upstream.url },
    // Nothing listens on port 1: the upstream cannot be reached.
    { prefix: '/v1/dead', upstream: 'http://127.0.0.1:1' },
  ],
}
const withDoor = await startGateway(t, { upstreamUrl: upstream.url, gatewayConfig })
const withoutDoor = await startGateway(t, {
  upstreamUrl: upstream.url,
  gatewayConfig,
  database: withDoor.database,
  frontDoor: false,
})
const parent = await withDoor.createParent()
const stranger = await withDoor.createParent()

interface Case {
  name: string
  method: string
  path: string
  headers?: Record<string, string | string[]>
  body?: string
  /** The front door serves it (else it declines it to fastify). */
  door: boolean
}

const key = { authorization: `Bearer ${parent.apiKey}` }
const cases: Case[] = [
  { name: 'a GET', method: 'GET', path: '/v1/things/1?q=a&b', headers: key, door: true },
  { name: 'a HEAD', method: 'HEAD', path: '/v1/things/1', headers: key, door: true },
  { name: 'a DELETE', method: 'DELETE', path: '/v1/things/2', headers: key, door: true },
  { name: 'an OPTIONS', method: 'OPTIONS', path: '/v1/things', headers: key, door: true },
  { name: 'the catch-all', method: 'GET', path: '/elsewhere/x', headers: key, door: true },
  { name: 'no key (401)', method: 'GET', path: '/v1/things/1', door: true },
  {
    name: 'another account (403)',
    method: 'GET',
    path: '/v1/things/1',
    headers: { ...key, 'x-service-acting-tenant': stranger.id },
    door: true,
  },
  { name: 'a reserved path (404)', method: 'GET', path: '/Healthz./x', headers: key, door: true },
  { name: 'a bad path (400)', method: 'GET', path: '/v1/things/a//b', headers: key, door: true },
  { name: 'a bad Host (400)', method: 'GET', path: '/v1/things/1', headers: { ...key, host: 'a b' }, door: true },
  { name: 'an upstream that cannot be reached (502)', method: 'GET', path: '/v1/dead/1', headers: key, door: true },
  {
    name: 'a client request id',
    method: 'GET',
    path: '/v1/things/1',
    headers: { ...key, 'x-request-id': 'abc-123' },
    door: true,
  },
  { name: 'a percent-encoding', method: 'GET', path: '/v1/th%69ngs/1', headers: key, door: false },
  { name: 'a semicolon in the query', method: 'GET', path: '/v1/things/1?a=1;b=2', headers: key, door: false },
  {
    name: 'a body',
    method: 'POST',
    path: '/v1/things',
    headers: { ...key, 'content-type': 'text/plain' },
    body: 'hi',
    door: false,
  },
  { name: 'a GET with a body', method: 'GET', path: '/v1/things/1', headers: key, body: 'hi', door: false },
  { name: 'a gateway path', method: 'GET', path: '/healthz', door: false },
  { name: 'a gateway path, HEAD', method: 'HEAD', path: '/healthz', door: false },
  { name: 'management', method: 'GET', path: '/v1/sub-accounts', headers: key, door: false },
]

interface Seen {
  status: number
  headers: Record<string, string>
  body: unknown
  upstreamGot: unknown
}

/** What a request id becomes in a comparison: the two gateways make different ones. */
function withoutIds(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutIds)
  if (value === null || typeof value !== 'object') return value
  const out: Record<string, unknown> = {}
  for (const [name, v] of Object.entries(value)) {
    // The echo's rawHeaders repeat its headers, which are compared.
    if (['request_id', 'x-request-id', 'host', 'x-forwarded-host', 'rawHeaders'].includes(name)) continue
    out[name] = withoutIds(v)
  }
  return out
}

async function send(gateway: TestGateway, c: Case): Promise<Seen> {
  const before = upstream.received.length
  const response = await request(`${gateway.url}${c.path}`, {
    method: c.method as 'GET',
    headers: c.headers,
    ...(c.body === undefined ? {} : { body: c.body }),
  })
  const text = await response.body.text()
  const headers: Record<string, string> = {}
  for (const [name, value] of Object.entries(response.headers)) if (name !== 'date') headers[name] = String(value)
  const upstreamGot = upstream.received.slice(before).map((r) => ({ method: r.method, url: r.url, headers: r.headers }))
  return { status: response.statusCode, headers, body: text === '' ? '' : JSON.parse(text), upstreamGot }
}

t.test('both doors answer every request alike, and the door takes only its own', async (t) => {
  for (const c of cases) {
    const door = withDoor.app.frontDoor!
    const servedBefore = door.served
    const a = await send(withDoor, c)
    const served = door.served - servedBefore
    const b = await send(withoutDoor, c)
    t.equal(served, c.door ? 1 : 0, `${c.name}: ${c.door ? 'served by the door' : 'left to fastify'}`)
    t.equal(a.status, b.status, `${c.name}: the same status (${b.status})`)
    t.ok(a.headers['x-request-id'], `${c.name}: a request id on the answer`)
    t.same(withoutIds(a.headers), withoutIds(b.headers), `${c.name}: the same headers`)
    t.same(withoutIds(a.body), withoutIds(b.body), `${c.name}: the same body`)
    t.same(withoutIds(a.upstreamGot), withoutIds(b.upstreamGot), `${c.name}: the upstream got the same`)
  }
  t.equal(withoutDoor.app.frontDoor, undefined, 'frontDoor: false opens no door')
})

t.test('the door counts what fastify would: metrics by kind and status class', async (t) => {
  for (const kind of ROUTE_KINDS)
    for (const statusClass of ['2xx', '4xx', '5xx']) {
      const labels = { kind, status_class: statusClass }
      t.equal(
        await metricValue(withDoor.app, 'tgw_http_requests_total', labels),
        await metricValue(withoutDoor.app, 'tgw_http_requests_total', labels),
        `tgw_http_requests_total ${kind} ${statusClass}`,
      )
    }
  t.equal(
    await metricValue(withDoor.app, 'tgw_proxied_requests_total'),
    await metricValue(withoutDoor.app, 'tgw_proxied_requests_total'),
    'tgw_proxied_requests_total',
  )
})
