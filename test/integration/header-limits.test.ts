// Trusted headers cannot be crowded out (docs/api.md, Proxied requests): past 100 header fields or
// 16 KiB of them a request is 431 headers_too_large on every route, before anything else reads
// it; under the limit, the upstream receives every trusted header. A Node upstream with default
// settings keeps only its first 2,000 raw header entries: a request with 1,021 or more fillers used
// to reach it without X-Service-Resolved-Tenant and the rest. Real sockets, Postgres and upstream.
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { rawRequest } from '../helpers/http.js'
import { checkProblem } from '../helpers/problems.js'
import { startUpstream } from '../helpers/upstream.js'

const upstream = await startUpstream(t)
const gw = await startGateway(t, { upstreamUrl: upstream.url })
const parent = await gw.createParent()
const auth: [string, string] = ['Authorization', `Bearer ${parent.apiKey}`]
const TRUSTED = [
  'x-service-resolved-tenant',
  'x-service-caller-tenant',
  'x-service-key-id',
  'x-service-scopes',
  'x-request-id',
]

/** `n` small header fields (`a0: x`…), so that only their number, not their size, is at stake. */
const fillers = (n: number): [string, string][] => Array.from({ length: n }, (_, i): [string, string] => [`a${i}`, 'x'])

const ROUTES: [string, string, [string, string][]][] = [
  ['a proxied route', 'GET /things/1', [auth]],
  ['the management API', 'GET /v1/sub-accounts', [auth]],
  ['the token endpoint', 'POST /oauth2/token', [['Content-Type', 'application/x-www-form-urlencoded']]],
  ['a health check', 'GET /healthz', []],
  ['the OpenAPI document', 'GET /openapi.json', []],
]

for (const [where, line, headers] of ROUTES) {
  t.test(`1,500 filler headers on ${where}: 431 headers_too_large, and nothing reaches the upstream`, async (t) => {
    const [method, path] = line.split(' ') as [string, string]
    const before = upstream.received.length
    const res = await rawRequest(gw.url, { method, path, headers: [...headers, ...fillers(1_500)] })
    if (path === '/oauth2/token') {
      // The token endpoint answers in RFC 6749's shape, with the same status.
      t.equal(res.status, 431)
      t.equal(res.json().error, 'invalid_request')
      t.match(res.json().error_description, 'more than 100 header fields or 16 KiB', 'the description says the limits')
    } else {
      checkProblem(t, res, 431, 'headers_too_large', where)
      t.match(res.json().detail, 'more than 100 header fields or 16 KiB', 'the detail says the limits')
    }
    t.equal(upstream.received.length, before, 'the upstream got nothing')
  })
}

t.test('100 header fields in all pass; 101 are 431', async (t) => {
  // Host, Authorization, Connection (node's client would add it) and the fillers.
  const close: [string, string] = ['Connection', 'close']
  const ok = await rawRequest(gw.url, { path: '/things/1', headers: [auth, close, ...fillers(97)] })
  t.equal(ok.status, 200, ok.body.slice(0, 200))
  const refused = await rawRequest(gw.url, { path: '/things/1', headers: [auth, close, ...fillers(98)] })
  checkProblem(t, refused, 431, 'headers_too_large', '101 fields')
})

t.test('a request with 99 headers: every trusted header reaches the upstream, with its value', async (t) => {
  const before = upstream.received.length
  const res = await rawRequest(gw.url, { path: '/things/1', headers: [auth, ...fillers(97)] })
  t.equal(res.status, 200, res.body.slice(0, 200))
  const got = upstream.received[before]!
  for (const name of TRUSTED) t.ok(got.headers[name], `${name} arrived`)
  t.equal(got.headers['x-service-resolved-tenant'], parent.id)
  t.equal(got.headers['x-service-key-id'], parent.keyId)
  // Written before the client's.
  const names = got.rawHeaders.filter((_, i) => i % 2 === 0).map((name) => name.toLowerCase())
  const firstFiller = names.indexOf('a0')
  for (const name of TRUSTED) t.ok(names.indexOf(name) < firstFiller, `${name} comes before the client's headers`)
  t.equal(
    got.rawHeaders.filter((_, i) => i % 2 === 0 && /^a\d+$/.test(got.rawHeaders[i]!)).length,
    97,
    'and every filler after them',
  )
})

t.test('a head over 16 KiB, refused by the HTTP parser itself, gets the same answer', async (t) => {
  const res = await rawRequest(gw.url, { path: '/things/1', headers: [auth, ['x-big', 'y'.repeat(17_000)]] })
  checkProblem(t, res, 431, 'headers_too_large', 'a 17,000-byte header')
  t.match(res.json().detail, 'more than 100 header fields or 16 KiB')
})

t.test('16 KiB of header bytes in few fields (app.inject has no parser limit): 431 all the same', async (t) => {
  const res = await gw.app.inject({ method: 'GET', url: '/healthz', headers: { 'x-big': 'y'.repeat(16_400) } })
  t.equal(res.statusCode, 431)
  t.equal(res.json().code, 'headers_too_large')
})
