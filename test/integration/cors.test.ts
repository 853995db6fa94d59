// Browsers on other origins (docs/api.md, Browsers on other origins), over real sockets against a
// real upstream, Postgres and Redis: a route's preflight answered by the gateway itself, 204 or
// 403 cors_refused, without a key, never forwarded, counted nowhere; an actual request keeps every
// rule, and its answer (refusals included) carries the CORS fields for an allowed origin only, the
// upstream's own replaced; a route without `cors` is as it was; a WebSocket upgrade is untouched.
import t, { type Test } from 'tap'
import { utcDay } from '../../src/usage/meter.js'
import { startGateway } from '../helpers/gateway.js'
import { callAs, type RawResponse, rawRequest } from '../helpers/http.js'
import { until } from '../helpers/poll.js'
import { checkProblem } from '../helpers/problems.js'
import { REFUSED_URL, startUpstream } from '../helpers/upstream.js'
import { openSocket, startWebSocketUpstream } from '../helpers/websocket.js'

const APP = 'https://app.example.com'
const EVIL = 'https://evil.example'
const HOUR = 3_600_000

// An upstream that grants every origin itself: on a CORS route the gateway's policy replaces it.
const upstream = await startUpstream(t, (_request, response) => {
  response.writeHead(200, {
    'content-type': 'text/plain',
    etag: '"v1"',
    vary: 'Accept-Encoding',
    'access-control-allow-origin': '*',
    'access-control-expose-headers': 'x-secret',
  })
  response.end('done')
})
const sockets = await startWebSocketUpstream(t)
const CORS = {
  origins: [APP, 'http://127.0.0.1:5173'],
  methods: ['GET', 'POST', 'PUT'],
  headers: ['X-Trace-Id'],
  expose_headers: ['ETag'],
  credentials: true,
  max_age_seconds: 600,
}
const gw = await startGateway(t, {
  usageFlushIntervalMs: HOUR,
  requestLog: { flushIntervalMs: 50 },
  gatewayConfig: {
    routes: [
      { prefix: '/v1/things', upstream: upstream.url, scopes: { read: ['things:read'] }, cors: CORS },
      { prefix: '/v1/any', upstream: upstream.url, cors: { origins: ['*'] } },
      { prefix: '/v1/dead', upstream: REFUSED_URL, cors: CORS },
      { prefix: '/v1/plain', upstream: upstream.url },
      { prefix: '/v1/live', upstream: sockets.url, websocket: true, cors: { origins: [APP] } },
    ],
  },
})
const parent = await gw.createParent({ scopes: ['sub_accounts:read', 'sub_accounts:write', 'things:read'] })

async function subAccount(name: string, limits?: unknown): Promise<string> {
  const res = await callAs(gw.url, parent.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts',
    acting: 'self',
    json: { name, ...(limits === undefined ? {} : { limits }) },
  })
  if (res.status !== 201) throw new Error(`create ${name}: ${res.status} ${res.body}`)
  return res.json().id as string
}

const corsFields = (res: RawResponse) => Object.keys(res.headers).filter((name) => name.startsWith('access-control-'))

function preflight(path: string, origin: string, method: string, headers?: string, extra: [string, string][] = []) {
  const fields: [string, string][] = [['Origin', origin], ['Access-Control-Request-Method', method], ...extra]
  if (headers !== undefined) fields.push(['Access-Control-Request-Headers', headers])
  return rawRequest(gw.url, { method: 'OPTIONS', path, headers: fields })
}

/** Asserts the CORS fields of an actual request's answer for the allowed `origin`. */
function allowedFields(t: Test, res: RawResponse, origin: string, what: string) {
  t.equal(res.headers['access-control-allow-origin'], origin, `${what}: the origin allowed`)
  t.equal(res.headers['access-control-allow-credentials'], 'true', `${what}: credentials`)
  t.match(res.headers.vary, /\bOrigin\b/, `${what}: Vary: Origin`)
  const exposed = String(res.headers['access-control-expose-headers']).split(', ')
  for (const name of ['ratelimit', 'ratelimit-policy', 'retry-after', 'x-request-id', 'etag'])
    t.ok(exposed.includes(name), `${what}: ${name} exposed`)
  t.equal(res.headers['access-control-max-age'], undefined, `${what}: no preflight field`)
}

t.test('a preflight for an allowed origin, method and headers: 204 from the gateway, with no key', async (t) => {
  const before = upstream.received.length
  for (const origin of [APP, 'http://127.0.0.1:5173']) {
    const res = await preflight(
      '/v1/things/7',
      origin,
      'PUT',
      'authorization,content-type,x-service-acting-tenant,idempotency-key,x-trace-id',
    )
    t.equal(res.status, 204, `${origin}: 204`)
    t.equal(res.body, '', `${origin}: no content`)
    t.equal(res.headers['access-control-allow-origin'], origin, `${origin}: the origin`)
    t.equal(res.headers['access-control-allow-methods'], 'GET, POST, PUT')
    t.match(
      res.headers['access-control-allow-headers'],
      /authorization, content-type, x-service-acting-tenant, idempotency-key, x-trace-id/,
    )
    t.equal(res.headers['access-control-allow-credentials'], 'true')
    t.equal(res.headers['access-control-max-age'], '600')
    t.equal(res.headers.vary, 'Origin')
    t.ok(res.headers['x-request-id'], 'its request id')
  }
  // A preflight with a key (no browser sends one) is still only a preflight.
  const keyed = await preflight('/v1/things', APP, 'GET', undefined, [['Authorization', `Bearer ${parent.apiKey}`]])
  t.equal(keyed.status, 204, 'with a key: 204 too')
  const any = await preflight('/v1/any/x', 'https://elsewhere.example', 'DELETE', 'authorization')
  t.equal(any.status, 204, '* allows any origin')
  t.equal(any.headers['access-control-allow-origin'], 'https://elsewhere.example')
  t.equal(any.headers['access-control-allow-credentials'], undefined, 'and no credentials')
  t.equal(upstream.received.length, before, 'the upstream heard of none of them')
})

t.test('any other preflight: 403 cors_refused, with no Access-Control-* field', async (t) => {
  const before = upstream.received.length
  const cases: [string, Promise<RawResponse>, RegExp][] = [
    [
      'another origin',
      preflight('/v1/things', EVIL, 'GET'),
      /origin "https:\/\/evil.example" may not call \/v1\/things/,
    ],
    ['http for https', preflight('/v1/things', 'http://app.example.com', 'GET'), /may not call/],
    ['a method not allowed', preflight('/v1/things', APP, 'DELETE'), /method "DELETE" is not allowed/],
    [
      'a header not allowed',
      preflight('/v1/things', APP, 'GET', 'authorization,x-other'),
      /header x-other is not allowed/,
    ],
    ['a header list that is none', preflight('/v1/things', APP, 'GET', 'x y'), /comma-separated list/],
    ['under *, a method not proxied', preflight('/v1/any', APP, 'TRACE'), /method "TRACE"/],
  ]
  for (const [what, answer, reason] of cases) {
    const res = await answer
    const body = checkProblem(t, res, 403, 'cors_refused', what)
    t.match(String(body.detail), reason, `${what}: says why`)
    t.same(corsFields(res), [], `${what}: no Access-Control-* field`)
  }
  t.equal(upstream.received.length, before, 'the upstream heard of none of them')
})

t.test('a route without cors is as it was: a preflight needs a key, the upstream speaks for itself', async (t) => {
  const res = await preflight('/v1/plain', APP, 'GET')
  checkProblem(t, res, 401, 'unauthenticated', 'a preflight on a route without cors')
  t.same(corsFields(res), [], 'no Access-Control-* field on the refusal')
  const ok = await callAs(gw.url, parent.apiKey, { path: '/v1/plain/x', acting: 'self', headers: [['Origin', APP]] })
  t.equal(ok.status, 200)
  t.equal(ok.headers['access-control-allow-origin'], '*', "the upstream's own field passes")
  t.equal(ok.headers.vary, 'Accept-Encoding', 'no Vary: Origin added')
})

t.test("an actual request's answer: the route's fields for an allowed origin, the upstream's replaced", async (t) => {
  const allowed = await callAs(gw.url, parent.apiKey, {
    path: '/v1/things/1',
    acting: 'self',
    headers: [['Origin', APP]],
  })
  t.equal(allowed.status, 200, 'forwarded')
  t.equal(allowed.body, 'done')
  allowedFields(t, allowed, APP, 'allowed origin')
  t.equal(allowed.headers.vary, 'Accept-Encoding, Origin', "the upstream's Vary kept beside Origin")
  t.notMatch(
    allowed.headers['access-control-expose-headers'],
    /x-secret/,
    "the upstream's expose list is not the client's",
  )

  for (const [what, origin] of [
    ['another origin', EVIL],
    ['no origin', undefined],
  ] as const) {
    const res = await callAs(gw.url, parent.apiKey, {
      path: '/v1/things/1',
      acting: 'self',
      headers: origin === undefined ? [] : [['Origin', origin]],
    })
    t.equal(res.status, 200, `${what}: forwarded all the same (CORS is the browser's rule)`)
    t.same(corsFields(res), [], `${what}: no Access-Control-* field, the upstream's '*' gone too`)
    t.equal(res.headers.vary, 'Accept-Encoding, Origin', `${what}: Vary names Origin`)
  }
})

t.test("the gateway's refusals carry the fields for an allowed origin, and only for one", async (t) => {
  const noScope = await gw.createParent({ scopes: ['sub_accounts:read'] })
  const limited = await subAccount('cors-limited', { rate: { requests: 1, per_seconds: 600 } })
  for (const origin of [APP, EVIL]) {
    const refusals: [string, () => Promise<RawResponse>, number][] = [
      ['no key', () => callAs(gw.url, null, { path: '/v1/things', headers: [['Origin', origin]] }), 401],
      [
        'a key without the scope',
        () => callAs(gw.url, noScope.apiKey, { path: '/v1/things', acting: 'self', headers: [['Origin', origin]] }),
        403,
      ],
      [
        'an upstream that cannot be reached',
        () => callAs(gw.url, parent.apiKey, { path: '/v1/dead', acting: 'self', headers: [['Origin', origin]] }),
        502,
      ],
    ]
    for (const [what, send, status] of refusals) {
      const res = await send()
      t.equal(res.status, status, `${what} from ${origin}: ${status}`)
      if (origin === APP) allowedFields(t, res, APP, `${what} from ${origin}`)
      else t.same(corsFields(res), [], `${what} from ${origin}: no Access-Control-* field`)
    }
  }
  // An OPTIONS without Access-Control-Request-Method is no preflight: a request like any, key and all.
  const options = await rawRequest(gw.url, { method: 'OPTIONS', path: '/v1/things', headers: [['Origin', APP]] })
  checkProblem(t, options, 401, 'unauthenticated', 'an OPTIONS that is no preflight')
  allowedFields(t, options, APP, 'an OPTIONS that is no preflight')
  // The rate limit: its 429 carries the fields the page reads to wait.
  let refused: RawResponse | undefined
  await until(30_000, async () => {
    const res = await callAs(gw.url, parent.apiKey, { path: '/v1/things', acting: limited, headers: [['Origin', APP]] })
    if (res.status === 429) refused = res
    return refused !== undefined
  })
  t.ok(refused, 'the limit refuses one at last')
  if (refused !== undefined) {
    allowedFields(t, refused, APP, 'a 429')
    t.ok(refused.headers.ratelimit && refused.headers['retry-after'], 'with RateLimit and Retry-After to read')
  }
})

t.test('a preflight is counted nowhere: no usage, no request log record, no limit', async (t) => {
  const tenant = await subAccount('cors-counted', { rate: { requests: 1, per_seconds: 600 } })
  const ids: string[] = []
  for (let i = 0; i < 3; i++) {
    const id = `cors-preflight-${Date.now()}-${i}`
    const res = await preflight('/v1/things', APP, 'GET', 'authorization', [
      ['Authorization', `Bearer ${parent.apiKey}`],
      ['X-Service-Acting-Tenant', tenant],
      ['X-Request-Id', id],
    ])
    t.equal(res.status, 204, `preflight ${i + 1}: 204`)
    ids.push(id)
  }
  const actual = await callAs(gw.url, parent.apiKey, { path: '/v1/things', acting: tenant, headers: [['Origin', APP]] })
  t.equal(actual.status, 200, "the tenant's one request of its limit is still there")
  await gw.app.usageMeter.flush()
  const rows = await gw.database.sql<{ requests: string }[]>`
    select requests::text from usage_daily where tenant_id = ${tenant} and day = ${utcDay(Date.now())}`
  t.same(
    rows.map((r) => Number(r.requests)),
    [1],
    'usage: the actual request alone',
  )
  const record = (id: string) =>
    callAs(gw.url, parent.apiKey, { path: `/v1/sub-accounts/requests/${id}`, acting: 'self' })
  const actualId = actual.headers['x-request-id'] as string
  t.ok(
    await until(10_000, async () => (await record(actualId)).status === 200),
    "the actual request's record is written",
  )
  for (const id of ids) t.equal((await record(id)).status, 404, `no record of preflight ${id}`)
})

t.test('a WebSocket upgrade on a CORS route is untouched by it', async (t) => {
  const opened = await openSocket(t, `${gw.url}/v1/live`, { key: parent.apiKey, headers: { origin: EVIL } })
  opened.ws.send('hello')
  t.equal(await opened.next(), 'hello', 'an upgrade from any origin opens, as on any route')
  opened.ws.close()
  // A refused upgrade is answered as on a route without cors: no field a browser would not read anyway.
  const refused = await rawRequest(gw.url, {
    path: '/v1/live',
    headers: [
      ['Origin', APP],
      ['Connection', 'Upgrade'],
      ['Upgrade', 'websocket'],
      ['Sec-WebSocket-Version', '13'],
      ['Sec-WebSocket-Key', 'dGhlIHNhbXBsZSBub25jZQ=='],
    ],
  })
  t.equal(refused.status, 401, 'an upgrade without a key: 401')
  t.same(corsFields(refused), [], 'with no Access-Control-* field')
  t.notMatch(String(refused.headers.vary ?? ''), /Origin/, 'nor Vary: Origin')
})
