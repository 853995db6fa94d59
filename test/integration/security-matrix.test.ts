// The security matrix: one case per line, each named after the guarantee it holds the gateway to.
// Other files prove much of this more broadly (proxy-headers, proxy-routing, security, replicas);
// here each attack has its own line, so that a regression names the attack it lets through.
// Requests that must arrive byte for byte go over a raw socket (test/helpers/hostile.ts); every
// case checks what the recording upstreams received, by the unique X-Request-Id it sent.
import { createServer, request as httpRequest, Agent } from 'node:http'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import { generateApiKey } from '../../src/auth/key-format.js'
import { metricValue, recentAdmissions, type TestGateway, startReplicas } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import type { JsonBody } from '../helpers/json.js'
import { eventually, sleep } from '../helpers/poll.js'
import { redisClient } from '../helpers/redis.js'
import {
  isParserRefusal,
  nextMarker,
  problemIssue,
  rawExchange,
  recordingUpstream,
  requestBytes,
  UPSTREAM_MARK,
  type HeaderLines,
  type RawExchange,
} from '../helpers/hostile.js'

// ---------------------------------------------------------------------------------------------
// Two replicas (A and B) of one deployment, sharing Postgres and a Redis prefix, with default
// cache timings: a record stays 5 s in a replica's own cache, so a refusal within 1 s on B can
// only come from the invalidation bus.

const catchAll = await recordingUpstream(t, 'catch-all')
const shipments = await recordingUpstream(t, 'shipments')
// An upstream whose answers carry hop-by-hop headers of its own, one of them named by Connection,
// and a request id of its own.
const hopByHop = createServer((_request, response) => {
  response.writeHead(200, {
    connection: 'keep-alive, x-upstream-hop',
    'x-upstream-hop': 'for the gateway only',
    'keep-alive': 'timeout=1, max=3',
    'x-request-id': 'the-upstream-s-own',
  })
  response.end('hop')
})
await new Promise<void>((resolve) => hopByHop.listen(0, '127.0.0.1', resolve))
t.teardown(
  () =>
    new Promise<void>((resolve) => {
      hopByHop.closeAllConnections()
      hopByHop.close(() => resolve())
    }),
)
const routes = {
  routes: [
    {
      prefix: '/v1/shipments',
      upstream: shipments.url,
      scopes: { read: ['tracking:read'], write: ['tracking:write'] },
    },
    { prefix: '/hop', upstream: `http://127.0.0.1:${(hopByHop.address() as AddressInfo).port}` },
  ],
}
const [a, b] = (await startReplicas(t, 2, { upstreamUrl: catchAll.url, gatewayConfig: routes })) as [
  TestGateway,
  TestGateway,
]
const portA = Number(new URL(a.url).port)

/** When the last change went through the management API (its invalidation is sent again 1 s later). */
let lastChangeAt = 0

/** Until the repeat of the last change's invalidation (1 s after it) is over. */
const afterRepeatedInvalidations = () =>
  new Promise((resolve) => setTimeout(resolve, Math.max(0, lastChangeAt + 1500 - Date.now())))

async function manage(gw: TestGateway, key: string, method: string, path: string, json?: unknown): Promise<JsonBody> {
  lastChangeAt = Date.now()
  const res = await callAs(gw.url, key, {
    method,
    path,
    acting: 'self',
    ...(json === undefined ? { headers: [['Content-Length', '0']] } : { json }),
  })
  if (res.status >= 300) throw new Error(`setup ${method} ${path}: ${res.status} ${res.body}`)
  return res.json()
}

const owner = await a.createParent()
const stranger = await a.createParent()
const ownSub = await manage(a, owner.apiKey, 'POST', '/v1/sub-accounts', { name: 'Acme EU', external_id: 'acme-eu' })
const foreignSub = await manage(a, stranger.apiKey, 'POST', '/v1/sub-accounts', {
  name: 'Foreign',
  external_id: 'foreign-only',
})
const foreignSubKey = await manage(a, stranger.apiKey, 'POST', `/v1/sub-accounts/${foreignSub.id}/api-keys`, {
  name: 'k',
  scopes: ['tracking:read'],
})
const ownerKeyId = ((await a.database.sql`select id from api_keys where tenant_id = ${owner.id}`)[0] as { id: string })
  .id

const received = (marker: string) => catchAll.byMarker(marker).length + shipments.byMarker(marker).length

/** One request over a raw socket, with a marker; the whole exchange (every response on it). */
function raw(
  method: string,
  target: string,
  headers: HeaderLines,
  options: { body?: string; until?: number; waitMs?: number } = {},
): { marker: string; exchange: Promise<RawExchange> } {
  const marker = nextMarker('sm')
  const bytes = requestBytes({
    method,
    target,
    headers: [['Host', `127.0.0.1:${portA}`], ['X-Request-Id', marker], ...headers],
    ...(options.body === undefined ? {} : { body: options.body }),
  })
  return { marker, exchange: rawExchange(portA, bytes, { until: options.until ?? 1, waitMs: options.waitMs ?? 3000 }) }
}

const auth = (key: string): [string, string] => ['Authorization', `Bearer ${key}`]

/** Asserts a refusal: the status and code, problem+json with the request id, and no upstream got it. */
async function refused(
  t: Test,
  method: string,
  target: string,
  headers: HeaderLines,
  status: number,
  code: string,
): Promise<void> {
  const { marker, exchange } = raw(method, target, [
    ...headers,
    ...(method === 'GET' ? [] : ([['Content-Length', '0']] as HeaderLines)),
  ])
  const res = (await exchange).responses[0]
  t.ok(res, `${method} ${target}: answered`)
  if (res === undefined) return
  t.equal(
    problemIssue(res, { status, code, requestId: marker }),
    null,
    `${method} ${target}: ${status} ${code}, problem+json (${res.status} ${res.body.slice(0, 160)})`,
  )
  t.equal(received(marker), 0, `${method} ${target}: no upstream received it`)
}

// ---------------------------------------------------------------------------------------------
// Request smuggling: a request whose framing is ambiguous, followed on the same connection by a
// request that an upstream reading the framing differently would see as a second one.

const SMUGGLED = '/smuggled-request'
const smuggledArrived = () =>
  [...catchAll.received, ...shipments.received].filter((r) => r.url.startsWith(SMUGGLED)).length

async function smuggle(t: Test, framing: HeaderLines, body: string): Promise<void> {
  const marker = nextMarker('smuggle')
  const second = `GET ${SMUGGLED}?after=${marker} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${owner.apiKey}\r\n\r\n`
  const bytes = requestBytes({
    method: 'POST',
    target: `/v1/things?marker=${marker}`,
    headers: [
      ['Host', `127.0.0.1:${portA}`],
      ['X-Request-Id', marker],
      auth(owner.apiKey),
      ['X-Service-Acting-Tenant', 'self'],
      ['Content-Type', 'text/plain'],
      ...framing,
    ],
    body: body + second,
  })
  const before = smuggledArrived()
  // Wait for the server to close (or 1.5 s): a second response would show that it read on.
  const exchange = await rawExchange(portA, bytes, { waitMs: 1500 })
  await sleep(100)
  t.equal(
    exchange.responses.length,
    1,
    `one response on the connection (got ${exchange.responses.map((r) => r.status).join(', ')})`,
  )
  t.equal(exchange.responses[0]?.status, 400, 'the ambiguous request is refused with 400')
  t.ok(exchange.closedByServer, 'and the connection is closed')
  t.ok(
    catchAll.byMarker(marker).length + shipments.byMarker(marker).length <= 1,
    'the upstreams saw at most one request',
  )
  t.equal(smuggledArrived() - before, 0, 'the smuggled second request never arrived')
  // Node's parser refuses such a request before fastify sees it, and the gateway's
  // clientErrorHandler answers in problem+json: no hook ran, so nothing could pass.
  const res = exchange.responses[0]
  t.ok(
    res !== undefined && isParserRefusal(res) && problemIssue(res) === null,
    "refused by Node's HTTP parser, as problem+json",
  )
}

// ---------------------------------------------------------------------------------------------
// Metrics, for the brute-force cases.

const counter = (gw: TestGateway, name: string, tier: string) => metricValue(gw.app, name, { tier })
const storeLookups = async (gw: TestGateway) => ({
  postgres: await counter(gw, 'tgw_store_lookups_total', 'postgres'),
  redis: await counter(gw, 'tgw_store_lookups_total', 'redis'),
  localMisses: await counter(gw, 'tgw_cache_misses_total', 'local'),
})

/** `tgw_` + 43 random base62 characters + their 6-character base62 CRC32 (README "Keys"): known to no store. */
const randomWellFormedKey = () => generateApiKey().apiKey

/** Sends `keys` to A over keep-alive connections, `concurrency` at a time; returns the statuses. */
async function flood(keys: string[], concurrency = 8): Promise<number[]> {
  const agent = new Agent({ keepAlive: true, maxSockets: concurrency })
  const statuses: number[] = new Array(keys.length)
  let next = 0
  const worker = async () => {
    while (next < keys.length) {
      const i = next++
      statuses[i] = await new Promise<number>((resolve, reject) => {
        const request = httpRequest(
          {
            host: '127.0.0.1',
            port: portA,
            path: `/brute/${i}`,
            agent,
            headers: { authorization: `Bearer ${keys[i]}` },
          },
          (response) => {
            response.resume()
            response.on('end', () => resolve(response.statusCode!))
          },
        )
        request.on('error', reject)
        request.end()
      })
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker))
  agent.destroy()
  return statuses
}

// ---------------------------------------------------------------------------------------------

t.test('GHSA-gwhp-pf74-vj37: a Connection header naming the trusted headers cannot remove them', async (t) => {
  const { marker, exchange } = raw('GET', '/orders/1', [
    auth(owner.apiKey),
    ['X-Service-Acting-Tenant', 'ext:acme-eu'],
    [
      'Connection',
      'close, X-Service-Resolved-Tenant, X-Service-Caller-Tenant, X-Service-Key-Id, X-Service-Scopes, X-Request-Id',
    ],
  ])
  t.equal((await exchange).responses[0]?.status, 200, 'proxied')
  const got = catchAll.byMarker(marker)[0]
  t.same(
    [
      got?.headers['x-service-resolved-tenant'],
      got?.headers['x-service-caller-tenant'],
      got?.headers['x-service-key-id'],
      got?.headers['x-service-scopes'],
      got?.headers['x-request-id'],
    ],
    [ownSub.id, owner.id, ownerKeyId, 'sub_accounts:read sub_accounts:write', marker],
    "the upstream received all five trusted headers, with the gateway's values",
  )
})

t.test(
  'CVE-2025-66415: an encoded dot pair (%2e%2e) in a proxied path is 400 bad_path and reaches no upstream',
  async (t) => {
    await refused(t, 'GET', '/v1/shipments/%2e%2e/admin', [], 400, 'bad_path')
  },
)

t.test(
  'CVE-2025-66415: an encoded slash (%2f) in a proxied path is 400 bad_path and reaches no upstream',
  async (t) => {
    await refused(t, 'GET', '/v1/shipments/x%2F..%2F..%2Fadmin', [auth(owner.apiKey)], 400, 'bad_path')
  },
)

t.test('prefix escape: /v1/shipments/../admin is 400 bad_path, never normalised into another route', async (t) => {
  await refused(t, 'GET', '/v1/shipments/../admin', [auth(owner.apiKey)], 400, 'bad_path')
})

t.test('prefix escape: /v1/shipments%2f..%2fadmin is 400 bad_path', async (t) => {
  await refused(t, 'GET', '/v1/shipments%2f..%2fadmin', [auth(owner.apiKey)], 400, 'bad_path')
})

// Judged as an upstream that decodes again will read them: once and twice decoded, and `;` or `#`
// spelled as %3b or %23. Management paths too.
for (const target of [
  '/v1/shipments/%252e%252e/admin',
  '/v1/shipments/%25252e%25252e/admin',
  '/v1/shipments%252f..%252fadmin',
  '/v1/shipments%252F%252e%252e%252Fadmin',
  '/v1/x%255c..',
  '/v1/orders%3bjsessionid=1',
  '/v1/orders%3B',
  '/v1/orders%253b',
  '/v1/orders%23x',
  '/v1/sub-accounts%3b/x',
  '/v1/sub-accounts/%252e%252e',
]) {
  t.test(`a path an upstream reads as traversal or parameters (${target}) is 400 bad_path`, async (t) => {
    await refused(t, 'GET', target, [auth(owner.apiKey)], 400, 'bad_path')
  })
}

t.test('prefix escape: /v1/shipmentsX does not match the /v1/shipments route (whole segments only)', async (t) => {
  // The owner's key lacks tracking:read: the /v1/shipments route would refuse it (403).
  const { marker, exchange } = raw('GET', '/v1/shipmentsX', [auth(owner.apiKey), ['Connection', 'close']])
  const res = (await exchange).responses[0]
  t.equal(res?.header(UPSTREAM_MARK), 'catch-all', 'the catch-all answered, not the scoped route')
  t.equal(shipments.byMarker(marker).length, 0, 'the /v1/shipments upstream received nothing')
})

t.test(
  'prefix escape: a percent-encoded letter (/v1/%73hipments) still takes the /v1/shipments route and its scopes',
  async (t) => {
    await refused(t, 'GET', '/v1/%73hipments/1', [auth(owner.apiKey)], 403, 'insufficient_scope')
  },
)

for (const target of [
  '/v1/x%00.json',
  '/v1/x%0a',
  '/v1/x%0D%0ASet-Cookie:%20a=b',
  '/v1/x%09',
  '/v1/x%1F',
  '/v1/x%7f',
]) {
  t.test(`a control character, percent-encoded (${target}), is 400 bad_path and reaches no upstream`, async (t) => {
    await refused(t, 'GET', target, [auth(owner.apiKey)], 400, 'bad_path')
  })
}

// A folding upstream (case, trailing dots and spaces) would serve these as /v1/shipments, whose
// scopes the owner's key lacks; the router would give them to the catch-all.
for (const target of [
  '/v1/Shipments/x',
  '/V1/shipments/x',
  '/v1/SHIPMENTS',
  '/v1/shipments./x',
  '/v1/shipments%20/x',
  '/v1/shipments%2e/x',
  '/v1/shipments.%20',
  // Letters that Unicode case folding or compatibility mapping reads as ASCII: long s, dotless i,
  // fullwidth s; and a double encoding.
  '/v1/%C5%BFhipments/x',
  '/v1/sh%C4%B1pments/x',
  '/v1/%EF%BD%93hipments/x',
  '/v1/%2573hipments/x',
  // Unicode spaces and default-ignorable code points at a segment's end, which trimming upstreams
  // drop: Ogham space mark, line separator, BOM, next line, soft hyphen, Mongolian vowel separator,
  // zero-width space, word joiner.
  '/v1/shipments%E1%9A%80/x',
  '/v1/shipments%E2%80%A8',
  '/v1/shipments%EF%BB%BF/x',
  '/v1/shipments%C2%85/x',
  '/v1/shipments%C2%AD',
  '/v1/shipments%E1%A0%8E/x',
  '/v1/shipments%E2%80%8B/x',
  '/v1/shipments%E2%81%A0%20./x',
  '/v1%E3%80%80/shipments/x',
]) {
  t.test(`prefix shadow: ${target} is 404 route_not_found, never the catch-all`, async (t) => {
    await refused(t, 'GET', target, [auth(owner.apiKey)], 404, 'route_not_found')
    await refused(t, 'POST', target, [auth(owner.apiKey), ['X-Service-Acting-Tenant', 'self']], 404, 'route_not_found')
  })
}

t.test('prefix shadow: /v1/shipmentsx/y is another path, and still goes to the catch-all', async (t) => {
  const { marker, exchange } = raw('GET', '/v1/shipmentsx/y', [auth(owner.apiKey), ['Connection', 'close']])
  const res = (await exchange).responses[0]
  t.equal(res?.status, 200)
  t.equal(res?.header(UPSTREAM_MARK), 'catch-all', 'the catch-all answered')
  t.equal(catchAll.byMarker(marker).length, 1, 'the catch-all received it')
})

for (const target of [
  '/v1/sub-accounts./x',
  '/v1/sub-accounts%20',
  '/v1/Sub-Accounts%2e/x',
  '/healthz.',
  '/docs%20/x',
  '/v1/%C5%BFub-accounts',
  '/doc%C5%BF',
]) {
  t.test(
    `prefix shadow: a spelling of a reserved path (${target}) is 404 route_not_found, never proxied`,
    async (t) => {
      await refused(t, 'GET', target, [auth(owner.apiKey)], 404, 'route_not_found')
      await refused(
        t,
        'DELETE',
        target,
        [auth(owner.apiKey), ['X-Service-Acting-Tenant', 'self']],
        404,
        'route_not_found',
      )
    },
  )
}

t.test(
  'an over-long id (5,000 characters) on every management route with one is 404 not_found, never proxied',
  async (t) => {
    const long = 'a'.repeat(5_000)
    const key = 'b'.repeat(5_000)
    const json = (value: unknown): [HeaderLines, string] => {
      const body = JSON.stringify(value)
      return [
        [
          ['Content-Type', 'application/json'],
          ['Content-Length', String(Buffer.byteLength(body))],
        ],
        body,
      ]
    }
    const none: [HeaderLines, string | undefined] = [[['Content-Length', '0']], undefined]
    for (const [method, target, [headers, body]] of [
      ['GET', `/v1/sub-accounts/${long}`, [[], undefined]],
      ['PATCH', `/v1/sub-accounts/${long}`, json({ name: 'x' })],
      ['POST', `/v1/sub-accounts/${long}/deactivate`, none],
      ['POST', `/v1/sub-accounts/${long}/reactivate`, none],
      ['GET', `/v1/sub-accounts/${long}/api-keys`, [[], undefined]],
      ['POST', `/v1/sub-accounts/${long}/api-keys`, json({ name: 'k', scopes: ['tracking:read'] })],
      ['POST', `/v1/sub-accounts/${long}/api-keys/${ownerKeyId}/revoke`, none],
      ['POST', `/v1/sub-accounts/${ownSub.id}/api-keys/${key}/revoke`, none],
    ] as const) {
      const { marker, exchange } = raw(
        method,
        target,
        [auth(owner.apiKey), ['X-Service-Acting-Tenant', 'self'], ...headers],
        body === undefined ? {} : { body },
      )
      const res = (await exchange).responses[0]
      const what = `${method} ${target.replace(/([ab])\1{4999}/, '<5,000 × $1>')}`
      t.ok(res, `${what}: answered`)
      if (res === undefined) continue
      t.equal(problemIssue(res, { status: 404, code: 'not_found', requestId: marker }), null, `${what}: 404 not_found`)
      t.equal(received(marker), 0, `${what}: no upstream received it`)
    }
  },
)

t.test(
  'prefix escape: a fragment cannot carry a management path to an upstream (DELETE /v1/sub-accounts#x)',
  async (t) => {
    // Routing ignores a fragment; the reserved-path check must not see another path (400 bad_path).
    const { marker, exchange } = raw('DELETE', '/v1/sub-accounts#x', [
      auth(owner.apiKey),
      ['X-Service-Acting-Tenant', 'self'],
      ['Content-Length', '0'],
      ['Connection', 'close'],
    ])
    const res = (await exchange).responses[0]
    t.equal(
      received(marker),
      0,
      `no upstream received it (answered ${res?.status} ${res?.body.slice(0, 100)}; upstream got ${
        catchAll
          .byMarker(marker)
          .map((r) => `${r.method} ${r.url}`)
          .join(', ') || 'nothing'
      })`,
    )
  },
)

t.test('prefix escape: a fragment cannot carry an ops path to an upstream (POST /healthz#x)', async (t) => {
  // The same, for an ops path.
  const { marker, exchange } = raw('POST', '/healthz#x', [
    auth(owner.apiKey),
    ['X-Service-Acting-Tenant', 'self'],
    ['Content-Length', '0'],
    ['Connection', 'close'],
  ])
  const res = (await exchange).responses[0]
  t.equal(
    received(marker),
    0,
    `no upstream received it (answered ${res?.status}; upstream got ${
      catchAll
        .byMarker(marker)
        .map((r) => `${r.method} ${r.url}`)
        .join(', ') || 'nothing'
    })`,
  )
})

t.test(
  'smuggling: Content-Length together with Transfer-Encoding: chunked is 400, the smuggled request never arrives',
  async (t) => {
    await smuggle(
      t,
      [
        ['Content-Length', '5'],
        ['Transfer-Encoding', 'chunked'],
      ],
      '0\r\n\r\n',
    )
  },
)

t.test('smuggling: two Content-Length headers with different values are 400', async (t) => {
  await smuggle(
    t,
    [
      ['Content-Length', '0'],
      ['Content-Length', '90'],
    ],
    '',
  )
})

t.test('smuggling: Content-Length with Transfer-Encoding: Chunked (odd casing) is 400', async (t) => {
  await smuggle(
    t,
    [
      ['Content-Length', '5'],
      ['Transfer-Encoding', 'ChUnKeD'],
    ],
    '0\r\n\r\n',
  )
})

t.test('smuggling: Content-Length with Transfer-Encoding padded by spaces and a tab is 400', async (t) => {
  await smuggle(
    t,
    [
      ['Content-Length', '5'],
      ['Transfer-Encoding', ' \tchunked\t '],
    ],
    '0\r\n\r\n',
  )
})

t.test('smuggling: Content-Length with Transfer-Encoding: xchunked is 400', async (t) => {
  await smuggle(
    t,
    [
      ['Content-Length', '5'],
      ['Transfer-Encoding', 'xchunked'],
    ],
    '0\r\n\r\n',
  )
})

t.test('smuggling: Transfer-Encoding: chunked, identity (chunked not last) is 400', async (t) => {
  await smuggle(t, [['Transfer-Encoding', 'chunked, identity']], '0\r\n\r\n')
})

t.test('smuggling: a Transfer-Encoding line folded onto the next (obs-fold) is 400', async (t) => {
  await smuggle(
    t,
    [
      ['Content-Length', '5'],
      ['Transfer-Encoding', '\r\n chunked'],
    ],
    '0\r\n\r\n',
  )
})

t.test('smuggling: a space before the colon of Transfer-Encoding is 400', async (t) => {
  await smuggle(
    t,
    [
      ['Content-Length', '5'],
      ['Transfer-Encoding ', 'chunked'],
    ],
    '0\r\n\r\n',
  )
})

t.test('pipelining: a well-framed second request on the same connection is authenticated on its own', async (t) => {
  const first = nextMarker('pipe')
  const second = nextMarker('pipe')
  const bytes = Buffer.concat([
    requestBytes({
      method: 'POST',
      target: '/pipelined/1',
      headers: [
        ['Host', 'x'],
        ['X-Request-Id', first],
        auth(owner.apiKey),
        ['X-Service-Acting-Tenant', 'self'],
        ['Content-Length', '5'],
      ],
      body: 'hello',
    }),
    requestBytes({
      method: 'GET',
      target: '/pipelined/2',
      headers: [
        ['Host', 'x'],
        ['X-Request-Id', second],
        ['Connection', 'close'],
      ],
    }),
  ])
  const exchange = await rawExchange(portA, bytes, { until: 2 })
  t.same(
    exchange.responses.map((r) => r.status),
    [200, 401],
    'the first is proxied, the second (no key) refused',
  )
  t.equal(catchAll.byMarker(first).length, 1, 'the upstream received the first')
  t.equal(received(second), 0, 'and not the second')
})

t.test('websocket: an upgrade without a key is 401 and never reaches the upstream', async (t) => {
  await refused(
    t,
    'GET',
    '/socket',
    [
      ['Upgrade', 'websocket'],
      ['Connection', 'Upgrade'],
      ['Sec-WebSocket-Key', 'dGhlIHNhbXBsZSBub25jZQ=='],
      ['Sec-WebSocket-Version', '13'],
    ],
    401,
    'unauthenticated',
  )
})

t.test('websocket: an upgrade with an invalid key is 401 and never reaches the upstream', async (t) => {
  const badChecksum = owner.apiKey.slice(0, -1) + (owner.apiKey.endsWith('a') ? 'b' : 'a')
  await refused(
    t,
    'GET',
    '/socket',
    [
      auth(badChecksum),
      ['Upgrade', 'websocket'],
      ['Connection', 'Upgrade'],
      ['Sec-WebSocket-Key', 'dGhlIHNhbXBsZSBub25jZQ=='],
      ['Sec-WebSocket-Version', '13'],
    ],
    401,
    'unauthenticated',
  )
})

t.test(
  'websocket: an upgrade with a valid key is not proxied as an upgrade (no 101, no Upgrade upstream)',
  async (t) => {
    const { marker, exchange } = raw('GET', '/socket', [
      auth(owner.apiKey),
      ['Upgrade', 'websocket'],
      ['Connection', 'Upgrade'],
      ['Sec-WebSocket-Key', 'dGhlIHNhbXBsZSBub25jZQ=='],
      ['Sec-WebSocket-Version', '13'],
    ])
    const res = (await exchange).responses[0]
    t.not(res?.status, 101, `no switch of protocols (${res?.status})`)
    const got = catchAll.byMarker(marker)[0]
    t.equal(got?.headers.upgrade, undefined, 'the upstream received no Upgrade header')
  },
)

t.test(
  "acting as another parent's sub-account is 403 acting_tenant_forbidden, the same answer as an unknown one",
  async (t) => {
    const answers: Record<string, unknown>[] = []
    for (const acting of [
      foreignSub.id,
      'ext:foreign-only',
      '00000000-0000-4000-8000-000000000000',
      'ext:nobody-at-all',
    ]) {
      const { marker, exchange } = raw('GET', '/orders', [
        auth(owner.apiKey),
        ['X-Service-Acting-Tenant', acting],
        ['Connection', 'close'],
      ])
      const res = (await exchange).responses[0]!
      t.equal(
        problemIssue(res, { status: 403, code: 'acting_tenant_forbidden', requestId: marker }),
        null,
        `${acting}: 403 acting_tenant_forbidden`,
      )
      t.equal(received(marker), 0, `${acting}: no upstream received it`)
      const { request_id: _id, ...rest } = res.json()
      answers.push(rest)
    }
    t.same(
      new Set(answers.map((answer) => JSON.stringify(answer))).size,
      1,
      'one and the same answer for foreign and unknown targets',
    )
  },
)

t.test("a sub-account key of another parent cannot act as this parent's sub-account", async (t) => {
  await refused(
    t,
    'GET',
    '/orders',
    [auth(foreignSubKey.api_key), ['X-Service-Acting-Tenant', ownSub.id]],
    403,
    'acting_tenant_forbidden',
  )
})

t.test('two Authorization headers are refused even when the second comes after 2,000 other headers', async (t) => {
  // Node keeps only the first server.maxHeadersCount headers: a second Authorization past them
  // would go unseen. The header limits refuse such a request (431) before any check reads them.
  // (The marker goes in the path, where no header count can push it out.)
  const padding: HeaderLines = Array.from({ length: 2000 }, (_, i) => [`X-P${i}`, 'v'])
  const marker = nextMarker('cut')
  const bytes = requestBytes({
    method: 'GET',
    target: `/orders/${marker}`,
    headers: [
      ['Host', 'x'],
      auth(owner.apiKey),
      ...padding,
      ['Authorization', 'Bearer tgw_second'],
      ['Connection', 'close'],
    ],
  })
  const res = (await rawExchange(portA, bytes, { until: 1 })).responses[0]
  t.ok(
    res !== undefined && res.status >= 400 && res.status < 500,
    `refused (got ${res?.status} ${res?.body.slice(0, 100)})`,
  )
  t.equal(catchAll.received.filter((r) => r.url.includes(marker)).length, 0, 'no upstream received it')
})

t.test(
  "hop-by-hop headers of the upstream's response (Keep-Alive, and those its Connection names) do not reach the client",
  async (t) => {
    // RFC 9110 §7.6.1 asks a proxy to drop them, and every header its Connection names.
    const { exchange } = raw('GET', '/hop/1', [auth(owner.apiKey)])
    const res = (await exchange).responses[0]
    t.equal(res?.body, 'hop', 'proxied')
    t.equal(
      res?.header('x-upstream-hop'),
      undefined,
      `no header that the upstream's Connection named (${res?.header('x-upstream-hop')})`,
    )
    t.not(res?.header('keep-alive'), 'timeout=1, max=3', "no Keep-Alive of the upstream's")
    t.notMatch(
      res?.header('connection') ?? '',
      /x-upstream-hop/i,
      `no Connection of the upstream's (${res?.header('connection')})`,
    )
  },
)

t.test("the response names the gateway's request id, not the upstream's", async (t) => {
  // raw() sends the marker as the client's X-Request-Id, which the gateway keeps.
  const { marker, exchange } = raw('GET', '/hop/2', [auth(owner.apiKey)])
  const res = (await exchange).responses[0]
  t.equal(res?.body, 'hop', 'proxied')
  t.same(res?.headers['x-request-id'], [marker], 'one X-Request-Id: the one the gateway kept')
})

t.test("the client's Connection: close is honoured on a proxied response", async (t) => {
  // The upstream's `Connection: keep-alive` must not keep open a connection the client asked to
  // close (RFC 9112 §9.6).
  const { exchange } = raw('GET', '/orders/3', [auth(owner.apiKey), ['Connection', 'close']], {
    until: 2,
    waitMs: 2000,
  })
  const done = await exchange
  t.equal(done.responses[0]?.status, 200, 'proxied')
  t.ok(done.closedByServer, 'the gateway closed the connection after its response')
})

t.test('a revoked key still cached on replica B is refused by B within 1 s of the revoke through A', async (t) => {
  const redis = redisClient(t)
  const subscribed = await eventually(
    5000,
    async () => Number(((await redis.pubsub('NUMSUB', `${a.redisKeyPrefix}invalidate`)) as [string, number])[1]) >= 2,
  )
  t.not(subscribed, null, 'A and B listen on the invalidation channel')
  const key = await manage(a, owner.apiKey, 'POST', `/v1/sub-accounts/${ownSub.id}/api-keys`, {
    name: 'soon revoked',
    scopes: ['tracking:read'],
  })
  const onB = () => callAs(b.url, key.api_key, { path: '/orders/revoked' })
  // The creation's invalidation is sent again 1 s later: past that, only the revoke's own message
  // can make B refuse the key below.
  await afterRepeatedInvalidations()
  t.equal((await onB()).status, 200, 'B accepts the key')
  // Until B admits it from its memory of the last admissions (no lookup at all, the closest to
  // the request a revoke must reach). Any eviction on B clears that memory, and so does the end
  // of its one-second window: then the next request remembers it again.
  const fromMemory = await eventually(2000, async () => {
    const recent = await recentAdmissions(b)
    const status = (await onB()).status
    return status === 200 && (await recentAdmissions(b)) > recent
  })
  t.not(fromMemory, null, 'B accepts it again, from its memory of the last admissions')
  await manage(a, owner.apiKey, 'POST', `/v1/sub-accounts/${ownSub.id}/api-keys/${key.id}/revoke`)
  const took = await eventually(1000, async () => (await onB()).status === 401)
  t.not(took, null, `B refuses the revoked key within 1 s (${took} ms)`)
})

t.test(
  'brute force: 2,000 random well-formed keys are all 401, at most one Postgres lookup each, none for a repeat',
  async (t) => {
    // A fill that overlaps a cache invalidation is not stored (README "Caches"): wait until the
    // repeats of the invalidations sent by earlier changes (1 s after each) are over.
    await afterRepeatedInvalidations()
    const before = await storeLookups(a)
    const upstreamBefore = catchAll.received.length + shipments.received.length
    let repeatLookups = 0
    const statuses: number[] = []
    // In batches: each key once, then the same keys again at once, while their "not found" is cached.
    for (let batch = 0; batch < 20; batch++) {
      const keys = Array.from({ length: 100 }, randomWellFormedKey)
      statuses.push(...(await flood(keys)))
      const mid = await storeLookups(a)
      statuses.push(...(await flood(keys)))
      repeatLookups += (await storeLookups(a)).postgres - mid.postgres
    }
    const after = await storeLookups(a)
    t.equal(statuses.filter((s) => s === 401).length, 4000, 'every one of the 4,000 requests was 401')
    t.ok(
      after.postgres - before.postgres <= 2000,
      `Postgres was asked ${after.postgres - before.postgres} times for 2,000 distinct keys`,
    )
    t.equal(repeatLookups, 0, 'the repeats cost no Postgres lookup (negative cache)')
    t.equal(catchAll.received.length + shipments.received.length, upstreamBefore, 'no upstream received any of them')
  },
)

t.test('brute force: malformed and bad-checksum keys cost no store lookup at all', async (t) => {
  const keys = Array.from({ length: 2000 }, (_, i) => {
    const good = randomWellFormedKey()
    switch (i % 4) {
      case 0: // the checksum of another key
        return good.slice(0, -6) + randomWellFormedKey().slice(-6)
      case 1: // one character changed
        return good.slice(0, 10) + (good[10] === 'a' ? 'b' : 'a') + good.slice(11)
      case 2: // a client secret's shape, a valid checksum, but not a key
        return `tgws_${good.slice(4)}`
      default: // too short, too long, foreign
        return ['tgw_', `${good}x`, good.slice(0, -1), `sk_live_${good.slice(4)}`, good.toLowerCase()][i % 5]!
    }
  })
  const before = await storeLookups(a)
  const statuses = await flood(keys)
  const after = await storeLookups(a)
  t.equal(statuses.filter((s) => s === 401).length, 2000, 'every one was 401')
  t.equal(after.postgres - before.postgres, 0, 'no Postgres lookup')
  t.equal(after.redis - before.redis, 0, 'no Redis lookup')
  t.equal(after.localMisses - before.localMisses, 0, 'not even a look into the in-process cache')
})

t.test("a request Node's HTTP parser refuses is answered in problem+json, and the connection closed", async (t) => {
  const marker = nextMarker('parser')
  const bytes = Buffer.from(`GET /orders/${marker} HTTP/1.1\r\nHost: x\r\nBad Header: v\r\n\r\n`)
  // Read until the server closes (or 1.5 s).
  const exchange = await rawExchange(portA, bytes, { waitMs: 1500 })
  const res = exchange.responses[0]
  t.ok(res !== undefined && isParserRefusal(res), `refused by the parser (${res?.status} ${res?.body.slice(0, 120)})`)
  t.equal(
    res === undefined ? 'no answer' : problemIssue(res, { status: 400, code: 'bad_request' }),
    null,
    'as problem+json',
  )
  t.ok(exchange.closedByServer, 'connection closed')
  const big = requestBytes({
    method: 'GET',
    target: `/orders/${marker}`,
    headers: [
      ['Host', 'x'],
      ['X-Big', 'v'.repeat(20_000)],
    ],
  })
  const huge = (await rawExchange(portA, big, { until: 1 })).responses[0]
  t.equal(
    huge === undefined ? 'no answer' : problemIssue(huge, { status: 431, code: 'headers_too_large' }),
    null,
    'a head over 16 KiB: 431 problem+json',
  )
  t.equal(received(marker), 0, 'no upstream received either')
})

t.test('two Host headers are 400 (RFC 9112 §3.2) and reach no upstream', async (t) => {
  await refused(t, 'GET', '/orders/1', [['Host', 'evil.example'], auth(owner.apiKey)], 400, 'bad_request')
})

t.test('method and URL overrides on a read-only key reach the upstream as a plain GET', async (t) => {
  const overrides: HeaderLines = [
    ['X-HTTP-Method-Override', 'DELETE'],
    ['X-HTTP-Method', 'DELETE'],
    ['X-Method-Override', 'DELETE'],
    ['X-Original-Method', 'DELETE'],
    ['X-Original-URL', '/admin/drop'],
    ['X-Rewrite-URL', '/admin/drop'],
    ['Forwarded', 'for=10.0.0.1;host=admin.internal'],
    ['X-Real-IP', '10.0.0.1'],
  ]
  const { marker, exchange } = raw('GET', '/v1/shipments/1', [auth(foreignSubKey.api_key), ...overrides])
  t.equal((await exchange).responses[0]?.status, 200, 'the read is allowed')
  const [got] = shipments.byMarker(marker)
  t.ok(got, 'the upstream got the read')
  t.equal(got?.method, 'GET')
  const arrived = overrides.map(([name]) => name.toLowerCase()).filter((name) => got?.headers[name] !== undefined)
  t.same(arrived, [], 'without any override, Forwarded or X-Real-IP')
})

t.test(
  "a lookalike X_Service_Resolved_Tenant naming another parent's sub-account never reaches the upstream",
  async (t) => {
    const { marker, exchange } = raw('GET', '/orders/lookalike', [
      auth(owner.apiKey),
      ['X_Service_Resolved_Tenant', foreignSub.id],
      ['x.service.resolved.tenant', foreignSub.id],
      ['x-service_resolved-tenant', foreignSub.id],
    ])
    t.equal((await exchange).responses[0]?.status, 200)
    const [got] = catchAll.byMarker(marker)
    const names: string[] = []
    for (let i = 0; i < (got?.rawHeaders.length ?? 0); i += 2) names.push(got!.rawHeaders[i]!.toLowerCase())
    t.same(
      names.filter((name) => name.replace(/[_.]/g, '-') === 'x-service-resolved-tenant'),
      ['x-service-resolved-tenant'],
      'one resolved-tenant header, spelled as the gateway spells it',
    )
    t.equal(got?.headers['x-service-resolved-tenant'], owner.id, "naming the caller's own tenant")
  },
)

t.test('Expect: 100-continue with an unknown key: the 401 is the only answer, with no 100 before it', async (t) => {
  const { marker, exchange } = raw('POST', '/v1/shipments', [
    auth(randomWellFormedKey()),
    ['Expect', '100-continue'],
    ['Content-Length', '5'],
  ])
  const res = (await exchange).responses[0]
  t.equal(res?.status, 401, `the first answer is the refusal (${res?.status})`)
  t.equal(received(marker), 0, 'no upstream received it')
})
