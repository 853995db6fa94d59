// The header limits (docs/api.md): past 100 header fields or 16 KiB of them, a request is
// 431 headers_too_large before routing, on every kind of route, and changes nothing; a head
// Node's parser refuses for its size says the same. Within them, the trusted headers reach a real
// Node upstream (default settings), written before any of the client's. Issue 28, finding 2: with
// 1,021 filler headers or more, such an upstream received none of them.
import t, { type Test } from 'tap'
import { HEADERS_TOO_LARGE } from '../../src/http/header-counts.js'
import { startGateway } from '../helpers/gateway.js'
import { problemIssue, rawExchange, requestBytes } from '../helpers/hostile.js'
import { type RawResponse, rawRequest } from '../helpers/http.js'
import { checkProblem } from '../helpers/problems.js'
import { basicAuthorization, clientKey } from '../helpers/tokens.js'
import { type ReceivedRequest, startUpstream } from '../helpers/upstream.js'

type Lines = [string, string][]

const upstream = await startUpstream(t)
const gw = await startGateway(t, {
  upstreamUrl: upstream.url,
  gatewayConfig: {
    routes: [{ prefix: '/signed', upstream: upstream.url, identity: { audience: 'https://signed.internal' } }],
  },
  env: { ISSUER_URL: 'https://gateway.test' },
})
const parent = await gw.createParent()
const client = await clientKey(gw.url, parent)
const auth: [string, string] = ['Authorization', `Bearer ${parent.apiKey}`]

interface RouteCase {
  kind: string
  method: string
  path: string
  headers: Lines
  body?: string
  /** What it answers with no filler. */
  ok: number
}

const SUB_ACCOUNT_BODY = (name: string) => JSON.stringify({ name })
/** One request of each kind of route: proxy, management, token endpoint, ops. */
function routeCases(name: string): RouteCase[] {
  const form = 'grant_type=client_credentials'
  const json = SUB_ACCOUNT_BODY(name)
  return [
    { kind: 'proxy', method: 'GET', path: `/orders/${name}`, headers: [auth], ok: 200 },
    {
      kind: 'management',
      method: 'POST',
      path: '/v1/sub-accounts',
      headers: [
        auth,
        ['X-Service-Acting-Tenant', 'self'],
        ['Content-Type', 'application/json'],
        ['Content-Length', String(Buffer.byteLength(json))],
      ],
      body: json,
      ok: 201,
    },
    {
      kind: 'token',
      method: 'POST',
      path: '/oauth2/token',
      headers: [
        ['Authorization', basicAuthorization(client.keyId, client.clientSecret)],
        ['Content-Type', 'application/x-www-form-urlencoded'],
        ['Content-Length', String(form.length)],
      ],
      body: form,
      ok: 200,
    },
    { kind: 'ops', method: 'GET', path: '/healthz', headers: [], ok: 200 },
  ]
}

function send(route: RouteCase, extra: Lines): Promise<RawResponse> {
  return rawRequest(gw.url, {
    method: route.method,
    path: route.path,
    // The filler goes first: the route's own headers come after it, where Node would drop them.
    headers: [...extra, ...route.headers],
    ...(route.body === undefined ? {} : { body: route.body }),
  })
}

async function subAccountNames(): Promise<string[]> {
  const rows = await gw.sql`select name from tenants where parent_id = ${parent.id}`
  return rows.map((row) => row.name as string)
}

/**
 * 431 with the text that says what to do: problem+json, or on the token endpoint RFC 6749's JSON
 * (its errors are never problem+json: docs/api.md).
 */
function checkRefused(t: Test, route: RouteCase, res: RawResponse, what: string): void {
  if (route.kind !== 'token') {
    const body = checkProblem(t, res, 431, 'headers_too_large', what)
    t.equal(body.detail, HEADERS_TOO_LARGE, `${what}: says what to do`)
    return
  }
  t.equal(res.status, 431, `${what}: status 431 (${res.body.slice(0, 200)})`)
  t.same(
    res.json(),
    { error: 'invalid_request', error_description: HEADERS_TOO_LARGE },
    `${what}: RFC 6749 JSON that says what to do`,
  )
  t.equal(res.headers['cache-control'], 'no-store', `${what}: no-store`)
}

/** Each kind of route answers 431 to `filler`, and nothing happens: no upstream, no sub-account. */
async function refusedEverywhere(t: Test, what: string, filler: (i: number) => Lines): Promise<void> {
  for (const [i, route] of routeCases(`${what.replace(/\W+/g, '-')}`).entries()) {
    const before = upstream.received.length
    const res = await send(route, filler(i))
    checkRefused(t, route, res, `${route.kind}, ${what}`)
    t.equal(upstream.received.length, before, `${route.kind}, ${what}: no upstream received it`)
  }
  t.notOk(
    (await subAccountNames()).some((name) => name.startsWith(what.replace(/\W+/g, '-'))),
    `${what}: no sub-account was created`,
  )
}

t.test('every kind of route serves the requests below when they come without filler', async (t) => {
  for (const route of routeCases('control')) {
    const res = await send(route, [])
    t.equal(res.status, route.ok, `${route.kind}: ${route.ok} (${res.body.slice(0, 200)})`)
  }
})

t.test('1,500 filler headers (8 KiB): 431 on every kind of route', async (t) => {
  // Short enough that the whole head stays under Node's 16 KiB: the field count refuses it.
  await refusedEverywhere(t, 'fields 1500', () => Array.from({ length: 1500 }, (_, i) => [`f${i}`, 'v']))
})

t.test('101 fields: 431; 100: served', async (t) => {
  // Host, Connection (node's client adds it) and the route's own headers count too.
  for (const route of routeCases('edge')) {
    const own = 2 + route.headers.length
    const filler = (n: number): Lines => Array.from({ length: n - own }, (_, i) => [`f${i}`, 'v'])
    checkRefused(t, route, await send(route, filler(101)), `${route.kind}, 101 fields`)
    const res = await send(route, filler(100))
    t.equal(res.status, route.ok, `${route.kind}, 100 fields: ${route.ok} (${res.body.slice(0, 200)})`)
  }
})

t.test("16 KiB of headers as sent, within the HTTP parser's measure: 431 on every kind of route", async (t) => {
  // Node's parser counts the target, names and values (16 KiB); the limit counts each field as
  // sent, `Name: value` and CRLF. 80 fillers that bring the parser's count near, not past, 16 KiB
  // are over 16 KiB as sent: only the gateway's count refuses them.
  await refusedEverywhere(t, 'bytes', (i) => {
    const route = routeCases('bytes')[i]!
    const lines: Lines = [['Host', `127.0.0.1:${gw.port}`], ...route.headers]
    const parsed = route.path.length + lines.reduce((sum, [name, value]) => sum + name.length + value.length, 0)
    // 64 bytes short of the parser's limit; 80 × 4 bytes of framing past the gateway's.
    const each = Math.floor((16 * 1024 - 64 - parsed) / 80)
    return Array.from({ length: 80 }, (_, k) => [`x-pad-${String(k).padStart(2, '0')}`, 'v'.repeat(each - 8)])
  })
})

t.test('a head over 16 KiB, refused by the HTTP parser: the same 431 and text', async (t) => {
  const bytes = requestBytes({
    method: 'GET',
    target: '/orders/1',
    headers: [['Host', 'x'], auth, ['X-Big', 'v'.repeat(20_000)]],
  })
  const before = upstream.received.length
  const res = (await rawExchange(gw.port, bytes, { until: 1 })).responses[0]
  t.equal(
    res === undefined ? 'no answer' : problemIssue(res, { status: 431, code: 'headers_too_large' }),
    null,
    '431 problem+json',
  )
  t.equal(res === undefined ? undefined : res.json().detail, HEADERS_TOO_LARGE, 'the same text')
  t.equal(upstream.received.length, before, 'no upstream received it')
})

const TRUSTED = [
  'x-service-resolved-tenant',
  'x-service-caller-tenant',
  'x-service-key-id',
  'x-service-scopes',
  'x-service-identity',
]

function rawNames(received: ReceivedRequest): string[] {
  return received.rawHeaders.filter((_, i) => i % 2 === 0).map((name) => name.toLowerCase())
}

t.test('99 header fields: a Node upstream receives every trusted header, before the client ones', async (t) => {
  // Host, Authorization and 97 fillers, some of them lookalikes of the trusted headers.
  const filler: Lines = Array.from({ length: 97 }, (_, i) =>
    i % 10 === 0 ? [`X-Service-Key-Id`, `forged-${i}`] : [`X-Filler-${i}`, 'v'],
  )
  const before = upstream.received.length
  const res = await rawRequest(gw.url, { path: '/signed/99', headers: [...filler, auth] })
  t.equal(res.status, 200, `served (${res.body.slice(0, 200)})`)
  t.equal(upstream.received.length, before + 1, 'the upstream got it')
  const got = upstream.received.at(-1)!
  for (const name of TRUSTED) t.match(got.headers[name], /\S/, `${name} arrived`)
  t.equal(got.headers['x-service-resolved-tenant'], parent.id, 'the resolved tenant')
  t.equal(got.headers['x-service-caller-tenant'], parent.id, 'the caller tenant')
  t.equal(got.headers['x-service-key-id'], parent.keyId, 'the key id, not a forged one')
  t.equal(got.headers['x-service-scopes'], 'sub_accounts:read sub_accounts:write', 'the scopes')
  t.ok(rawNames(got).includes('x-filler-96'), "the client's last header arrived too")
  // Written first: whatever an upstream keeps of a long head, it keeps them.
  const names = rawNames(got)
  const firstClient = names.indexOf('x-filler-1')
  t.ok(
    TRUSTED.every((name) => names.indexOf(name) !== -1 && names.indexOf(name) < firstClient),
    `the trusted headers come before the client's (${names.slice(0, 8).join(', ')}…)`,
  )
})
