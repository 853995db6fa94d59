// The proxy over real sockets, part two: the route table (docs/configuration.md), bad paths
// (docs/api.md), upstream failures and request bodies. Every outcome is checked on what the
// recording upstreams actually got.
import { randomBytes } from 'node:crypto'
import { request as httpRequest } from 'node:http'
import { createServer as createNetServer } from 'node:net'
import t, { type Test } from 'tap'
import { startGateway, type TestGateway } from '../helpers/gateway.js'
import { rawRequest, type RawResponse, sha256 } from '../helpers/http.js'
import { checkProblem } from '../helpers/problems.js'
import {
  REFUSED_URL,
  listenOnLoopback,
  type ReceivedRequest,
  startUpstream,
  type Upstream,
} from '../helpers/upstream.js'

/** A request as `key` (none when null), the path sent exactly as written. */
function send(
  gw: TestGateway,
  key: string | null,
  method: string,
  path: string,
  options: { headers?: [string, string][]; body?: string | Buffer; contentType?: string | null } = {},
): Promise<RawResponse> {
  const headers: [string, string][] = []
  if (key !== null) headers.push(['Authorization', `Bearer ${key}`])
  if (options.body !== undefined) {
    if (options.contentType !== null) headers.push(['Content-Type', options.contentType ?? 'application/octet-stream'])
    headers.push(['Content-Length', String(Buffer.byteLength(options.body))])
  }
  headers.push(...(options.headers ?? []))
  return rawRequest(gw.url, { method, path, headers, ...(options.body === undefined ? {} : { body: options.body }) })
}

/** Counts what every upstream of a group received, to assert that a refusal reached none. */
function counter(upstreams: Upstream[]) {
  const total = () => upstreams.reduce((sum, upstream) => sum + upstream.received.length, 0)
  return {
    async nothingReached<T>(t: Test, what: string, act: () => Promise<T>): Promise<T> {
      const before = total()
      const result = await act()
      t.equal(total(), before, `${what}: no upstream received anything`)
      return result
    },
  }
}

/** Sends a request and returns the single request `upstream` got for it. */
async function reaches(
  t: Test,
  upstream: Upstream,
  what: string,
  act: () => Promise<RawResponse>,
): Promise<{ res: RawResponse; got: ReceivedRequest | undefined }> {
  const before = upstream.received.length
  const res = await act()
  t.equal(upstream.received.length, before + 1, `${what}: the intended upstream got it once`)
  return { res, got: upstream.received.length > before ? upstream.received[upstream.received.length - 1] : undefined }
}

t.test('the route table (docs/configuration.md)', async (t) => {
  const ship = await startUpstream(t)
  const labels = await startUpstream(t)
  const based = await startUpstream(t)
  const pub = await startUpstream(t)
  const catchAll = await startUpstream(t)
  const all = [ship, labels, based, pub, catchAll]
  const routes = [
    { prefix: '/v1/shipments', upstream: ship.url, scopes: { read: ['tracking:read'], write: ['tracking:write'] } },
    { prefix: '/v1/shipments/labels', upstream: labels.url },
    { prefix: '/v1/based', upstream: `${based.url}/base` },
    { prefix: '/health/upstream', upstream: pub.url, public: true },
  ]
  const gw = await startGateway(t, { gatewayConfig: { routes }, upstreamUrl: `${catchAll.url}/root` })
  // The same deployment without the catch-all: it shares the database and the Redis prefix.
  const noCatchAll = await startGateway(t, {
    gatewayConfig: { routes },
    database: gw.database,
    redisKeyPrefix: gw.redisKeyPrefix,
  })
  const { nothingReached } = counter(all)

  const owner = await gw.createParent()
  const star = await gw.createParent({ scopes: ['tracking:*'] })
  const reader = await gw.createParent({ scopes: ['tracking:read'] })
  const writer = await gw.createParent({ scopes: ['tracking:write'] })
  const other = await gw.createParent({ scopes: ['billing:read', 'billing:write'] })
  const both = await gw.createParent({ scopes: ['tracking:read', 'tracking:write'] })

  t.test('longest prefix wins, on whole segments; the path goes through unchanged', async (t) => {
    const cases: [string, Upstream, string][] = [
      ['/v1/shipments/labels/9', labels, '/v1/shipments/labels/9'],
      ['/v1/shipments/labels', labels, '/v1/shipments/labels'],
      ['/v1/shipments/labels/', labels, '/v1/shipments/labels/'],
      ['/v1/shipments/labelsX/1', ship, '/v1/shipments/labelsX/1'],
      ['/v1/shipments/9', ship, '/v1/shipments/9'],
      ['/v1/shipments/9/labels', ship, '/v1/shipments/9/labels'],
      ['/v1/shipments', ship, '/v1/shipments'],
      ['/v1/shipments/', ship, '/v1/shipments/'],
      ['/v1/shipments/9?x=1&x=2', ship, '/v1/shipments/9?x=1&x=2'],
      // The query as the client sent it: not decoded and encoded again (`a%20b`, `flag=`).
      ['/v1/shipments/9?q=a+b&flag&e=%7e&s=%2F', ship, '/v1/shipments/9?q=a+b&flag&e=%7e&s=%2F'],
      ['/v1/ship%6Dents/9?q=1', ship, '/v1/shipments/9?q=1'],
      ["/v1/shipments/a%20b/caf%C3%A9/~x@y:z!$'()*+,=", ship, "/v1/shipments/a%20b/caf%C3%A9/~x@y:z!$'()*+,="],
      ['/v1/shipmentsX', catchAll, '/root/v1/shipmentsX'],
      ['/v1/shipmentsX/1', catchAll, '/root/v1/shipmentsX/1'],
      ['/v1/shipment', catchAll, '/root/v1/shipment'],
      ['/v1', catchAll, '/root/v1'],
      ['/other/thing?q=1', catchAll, '/root/other/thing?q=1'],
      ['/v1/based/x/y?z=1', based, '/base/v1/based/x/y?z=1'],
      ['/v1/based', based, '/base/v1/based'],
      ['/v1/basedX', catchAll, '/root/v1/basedX'],
    ]
    for (const [path, upstream, expected] of cases) {
      for (const method of ['GET', 'POST']) {
        const what = `${method} ${path}`
        const body = method === 'POST' ? `{"path":"${path}"}` : undefined
        const { res, got } = await reaches(t, upstream, what, () =>
          send(gw, star.apiKey, method, path, body === undefined ? {} : { body, contentType: 'application/json' }),
        )
        t.equal(res.status, 200, `${what}: 200`)
        t.equal(got?.url, expected, `${what}: arrives as ${expected}`)
        t.equal(got?.method, method, `${what}: method`)
        if (body !== undefined) t.equal(got?.bodySha256, sha256(body), `${what}: body`)
      }
    }
    // Nothing went anywhere else: 18 paths, two methods each, one upstream each.
    t.equal(
      all.reduce((sum, upstream) => sum + upstream.received.length, 0),
      cases.length * 2,
      'no request reached a second upstream',
    )
  })

  t.test('no route matches: 404 route_not_found', async (t) => {
    const paths: [string, string | null][] = [
      ['/nothing', owner.apiKey],
      ['/nothing', null],
      ['/v1/shipmentsX', owner.apiKey],
      ['/v1/shipment', star.apiKey],
      ['/v1', star.apiKey],
      ['/', star.apiKey],
      ['/v1/basedX/1', star.apiKey],
    ]
    for (const [path, key] of paths) {
      for (const method of ['GET', 'HEAD', 'POST', 'DELETE']) {
        const what = `${method} ${path} ${key === null ? 'without' : 'with'} a key`
        const headers: [string, string][] = method === 'GET' || method === 'HEAD' ? [] : [['Content-Length', '0']]
        const res = await nothingReached(t, what, () => send(noCatchAll, key, method, path, { headers }))
        if (method === 'HEAD') t.equal(res.status, 404, `${what}: 404`)
        else checkProblem(t, res, 404, 'route_not_found', what)
      }
    }
    // The same gateway still routes what it has (it shares the database, so the keys work).
    const { res } = await reaches(t, labels, 'a known route', () =>
      send(noCatchAll, star.apiKey, 'GET', '/v1/shipments/labels/1'),
    )
    t.equal(res.status, 200, 'a known route on the gateway without a catch-all')
  })

  t.test('no route matches, whatever the request carries: still 404 route_not_found', async (t) => {
    // The answer names the missing route, not what the body would have needed somewhere else.
    const requests: [string, string, string | null, string][] = [
      ['POST', '/nothing', 'text/csv', 'a,b\n1,2\n'],
      ['PUT', '/nothing', 'application/json', '{not json'],
      ['PATCH', '/v1/shipmentsX', 'application/octet-stream', 'raw bytes'],
      ['POST', '/nothing', null, 'no content type'],
      ['DELETE', '/v1/sub-accounts', 'text/plain', 'a management path with a method it does not serve'],
    ]
    for (const [method, path, contentType, body] of requests) {
      for (const key of [star.apiKey, null]) {
        const what = `${method} ${path} with a ${contentType ?? 'typeless'} body ${key === null ? 'without' : 'with'} a key`
        const res = await nothingReached(t, what, () => send(noCatchAll, key, method, path, { body, contentType }))
        checkProblem(t, res, 404, 'route_not_found', what)
      }
    }
    // A chunked request with an empty body.
    const chunked = await nothingReached(t, 'an empty chunked POST', () =>
      send(noCatchAll, star.apiKey, 'POST', '/nothing'),
    )
    checkProblem(t, chunked, 404, 'route_not_found', 'an empty chunked POST')
  })

  t.test('management paths are never proxied, even with a catch-all', async (t) => {
    const subId = '00000000-0000-4000-8000-000000000000'
    const cases: [string, string][] = [
      ['DELETE', '/v1/sub-accounts'],
      ['PUT', '/v1/sub-accounts'],
      ['DELETE', `/v1/sub-accounts/${subId}`],
      ['PUT', `/v1/sub-accounts/${subId}`],
      ['GET', '/v1/sub-accounts/x/y/z/w'],
      ['POST', '/v1/sub-accounts/x/y/z/w'],
      ['GET', '/V1/Sub-Accounts/x'],
      ['GET', '/V1/SUB-ACCOUNTS'],
      ['POST', '/v1/Sub-Accounts'],
    ]
    for (const [method, path] of cases) {
      for (const key of [owner.apiKey, null]) {
        const what = `${method} ${path} ${key === null ? 'without' : 'with'} a key`
        const res = await nothingReached(t, what, () =>
          send(gw, key, method, path, { headers: [['X-Service-Acting-Tenant', 'self']] }),
        )
        checkProblem(t, res, 404, 'route_not_found', what)
      }
    }
    // Other spellings of a management path: the management API may answer them itself, but no
    // upstream ever sees them.
    for (const [method, path] of [
      ['GET', '/v1/sub%2Daccounts/x'],
      ['GET', '/v1/sub%2daccounts'],
      ['GET', '/v1/sub-accounts/'],
      ['DELETE', '/v1/sub-accounts/'],
      ['DELETE', '/v1/sub%2Daccounts/x'],
    ] as const) {
      const what = `${method} ${path}`
      const res = await nothingReached(t, what, () =>
        send(gw, owner.apiKey, method, path, {
          headers: [
            ['X-Service-Acting-Tenant', 'self'],
            ['Content-Length', '0'],
          ],
        }),
      )
      t.notMatch(res.body, /rawHeaders/, `${what}: answered by the gateway, not an upstream (${res.status})`)
    }
    // And the management API itself still answers on the same gateway.
    const list = await nothingReached(t, 'GET /v1/sub-accounts', () =>
      send(gw, owner.apiKey, 'GET', '/v1/sub-accounts'),
    )
    t.equal(list.status, 200, 'the management API answers')
  })

  t.test('per-route scopes: read for GET, HEAD, OPTIONS; write for the rest', async (t) => {
    const keys: [string, string, Set<'read' | 'write'>][] = [
      ['tracking:read', reader.apiKey, new Set(['read'])],
      ['tracking:write', writer.apiKey, new Set(['write'])],
      ['tracking:read and tracking:write', both.apiKey, new Set(['read', 'write'])],
      ['tracking:*', star.apiKey, new Set(['read', 'write'])],
      ['billing:* only', other.apiKey, new Set()],
    ]
    const methods: [string, 'read' | 'write'][] = [
      ['GET', 'read'],
      ['HEAD', 'read'],
      ['OPTIONS', 'read'],
      ['POST', 'write'],
      ['PUT', 'write'],
      ['PATCH', 'write'],
      ['DELETE', 'write'],
    ]
    for (const [name, key, grants] of keys) {
      for (const [method, needs] of methods) {
        const what = `${method} with ${name}`
        if (grants.has(needs)) {
          const { res, got } = await reaches(t, ship, what, () => send(gw, key, method, '/v1/shipments/7'))
          t.equal(res.status, 200, `${what}: 200`)
          t.equal(got?.method, method, `${what}: method`)
        } else {
          const res = await nothingReached(t, what, () => send(gw, key, method, '/v1/shipments/7'))
          t.equal(res.status, 403, `${what}: 403`)
          t.equal(
            res.headers['www-authenticate'],
            `Bearer error="insufficient_scope", scope="tracking:${needs}"`,
            `${what}: WWW-Authenticate names the scope`,
          )
          if (method !== 'HEAD') checkProblem(t, res, 403, 'insufficient_scope', what)
        }
      }
    }
    // A route without scopes takes any key; the catch-all too.
    for (const [path, upstream] of [
      ['/v1/shipments/labels/1', labels],
      ['/anything', catchAll],
    ] as const) {
      const { res } = await reaches(t, upstream, `${path} with billing scopes`, () =>
        send(gw, other.apiKey, 'DELETE', path),
      )
      t.equal(res.status, 200, `${path}: no scopes needed`)
    }
    // The scopes arrive as granted, wildcard included.
    const { got } = await reaches(t, ship, 'wildcard', () => send(gw, star.apiKey, 'GET', '/v1/shipments/8'))
    t.equal(got?.headers['x-service-scopes'], 'tracking:*', 'the key scopes, as granted')
  })

  t.test('a public route needs no key, strips X-Service-* and injects no identity', async (t) => {
    const spoofs: [string, string][] = [
      ['X-Service-Resolved-Tenant', 'evil-resolved'],
      ['x-service-caller-tenant', 'evil-caller'],
      ['X-SERVICE-KEY-ID', 'evil-key'],
      ['X-Service-Scopes', 'evil-scopes'],
      ['X-Service-Anything', 'evil-anything'],
      ['X-Service-Acting-Tenant', 'self'],
    ]
    const requests: [string, string | null, { headers?: [string, string][]; body?: string; contentType?: string }][] = [
      ['GET without a key', null, {}],
      ['GET without a key, spoofing', null, { headers: spoofs }],
      ['POST without a key, spoofing', null, { headers: spoofs, body: 'ping', contentType: 'text/plain' }],
      ['GET with a valid key and an acting header', owner.apiKey, { headers: spoofs }],
    ]
    for (const [what, key, options] of requests) {
      const method = options.body === undefined ? 'GET' : 'POST'
      const { res, got } = await reaches(t, pub, what, () =>
        send(gw, key, method, '/health/upstream/deep?x=1', options),
      )
      t.equal(res.status, 200, `${what}: 200`)
      t.equal(got?.url, '/health/upstream/deep?x=1', `${what}: path`)
      const names = (got?.rawHeaders ?? []).filter((_, i) => i % 2 === 0).map((name) => name.toLowerCase())
      t.same(
        names.filter((name) => name.startsWith('x-service-')),
        [],
        `${what}: no X-Service-* header at all`,
      )
      t.notOk(
        got?.rawHeaders.some((value) => value.includes('evil')),
        `${what}: no spoofed value`,
      )
      t.notOk(names.includes('authorization'), `${what}: no Authorization`)
      t.equal(got?.headers['x-request-id'], res.headers['x-request-id'], `${what}: the request id still goes`)
      if (options.body !== undefined) t.equal(got?.bodySha256, sha256(options.body), `${what}: body`)
    }
    // The bare prefix too.
    const { res } = await reaches(t, pub, 'the bare prefix', () => send(gw, null, 'GET', '/health/upstream'))
    t.equal(res.status, 200)
    // A sibling path is not public.
    const sibling = await send(gw, null, 'GET', '/health/upstreamX')
    checkProblem(t, sibling, 401, 'unauthenticated', 'a sibling of the public prefix')
  })
})

t.test('bad paths are refused before authentication (docs/api.md)', async (t) => {
  const upstream = await startUpstream(t)
  const shipments = await startUpstream(t)
  const gw = await startGateway(t, {
    upstreamUrl: upstream.url,
    gatewayConfig: { routes: [{ prefix: '/v1/shipments', upstream: shipments.url }] },
  })
  const owner = await gw.createParent()
  const { nothingReached } = counter([upstream, shipments])

  const proxiedPaths = [
    '/v1/shipments/../admin',
    '/v1/shipments/..',
    '/v1/shipments/a/../../etc/passwd',
    '/..',
    '/v1/shipments/%2e%2e/admin',
    '/v1/shipments/%2E%2e/admin',
    '/v1/shipments/%2E%2E/admin',
    '/v1/shipments/.%2e/admin',
    '/v1/shipments/.%2E/admin',
    '/v1/shipments/%2e./admin',
    '/v1/shipments/a%2fb',
    '/v1/shipments/a%2Fb',
    '/v1/shipments%2f..%2fadmin',
    '/v1/shipments/a%5Cb',
    '/v1/shipments/a%5cb',
    '/v1/shipments/a\\b',
    '/v1/shipments//a',
    '//v1/shipments/a',
    '/v1/shipments/a//',
    '/v1/shipments/a;b=c',
    '/v1/shipments;x/a',
    '/other/a;jsessionid=1',
    // A lone dot segment would be dropped by the upstream URL: /v1/./shipments would reach
    // /v1/shipments through the catch-all, past that route's scopes.
    '/v1/./shipments/a',
    '/v1/%2e/shipments/a',
    '/v1/shipments/.',
  ]
  const managementPaths = [
    '/v1/sub-accounts/../x',
    '/v1/sub-accounts/..',
    '/v1/%2E/sub-accounts',
    '/v1/./sub-accounts',
    '/v1/sub-accounts/%2e%2e',
    '/v1/sub-accounts/%2E%2e/x',
    '/v1/sub-accounts/.%2e',
    '/v1/sub-accounts%2fx',
    '/v1/sub-accounts/x%2Fapi-keys',
    '/v1/sub-accounts/x%5Cy',
    '/v1/sub-accounts//x',
    '/v1//sub-accounts',
    '/v1/sub-accounts;x',
    '/v1/sub-accounts/x;y',
  ]
  for (const [kind, paths] of [
    ['proxied', proxiedPaths],
    ['management', managementPaths],
  ] as const) {
    t.test(`${kind} paths`, async (t) => {
      for (const path of paths) {
        for (const method of ['GET', 'POST']) {
          for (const key of [null, owner.apiKey]) {
            const what = `${method} ${path} ${key === null ? 'without' : 'with'} a key`
            const res = await nothingReached(t, what, () =>
              send(gw, key, method, path, method === 'POST' ? { body: '{}', contentType: 'application/json' } : {}),
            )
            checkProblem(t, res, 400, 'bad_path', what)
          }
        }
      }
    })
  }

  t.test('the same characters in the query string are not a bad path', async (t) => {
    const path = '/v1/shipments/a?p=..%2f;//%5c&q=%2e%2e'
    const { res, got } = await reaches(t, shipments, path, () => send(gw, owner.apiKey, 'GET', path))
    t.equal(res.status, 200)
    t.equal(got?.url, path, 'forwarded as sent')
  })
})

/** A server that accepts each connection and closes it at once; counts the connections. */
async function slammingServer(t: Test): Promise<{ url: string; connections: () => number }> {
  let connections = 0
  const server = createNetServer((socket) => {
    connections++
    socket.destroy()
  })
  const { port } = await listenOnLoopback(t, server)
  return { url: `http://127.0.0.1:${port}`, connections: () => connections }
}

t.test('upstream failures (docs/api.md)', async (t) => {
  const down = REFUSED_URL
  let answeredLate = false
  const lateTimers = new Set<NodeJS.Timeout>()
  t.teardown(() => {
    for (const timer of lateTimers) clearTimeout(timer)
  })
  const slow = await startUpstream(t, (_request, response) => {
    const timer = setTimeout(() => {
      answeredLate = true
      response.end('late')
    }, 2000)
    lateTimers.add(timer)
  })
  const flaky = await startUpstream(t, (_request, response) => {
    response.writeHead(503, { 'content-type': 'text/plain', 'retry-after': '0' })
    response.end('try later')
  })
  const resetting = await startUpstream(t, (request) => {
    request.socket.destroy()
  })
  const slamming = await slammingServer(t)
  const gw = await startGateway(t, {
    gatewayConfig: {
      routes: [
        { prefix: '/down', upstream: down },
        { prefix: '/slow', upstream: slow.url, timeout_ms: 300 },
        { prefix: '/flaky', upstream: flaky.url },
        { prefix: '/reset', upstream: resetting.url },
        { prefix: '/slam', upstream: slamming.url },
      ],
    },
  })
  const owner = await gw.createParent()

  t.test('an unreachable upstream is 502 upstream_unavailable', async (t) => {
    for (const method of ['GET', 'POST', 'DELETE']) {
      const res = await send(
        gw,
        owner.apiKey,
        method,
        '/down/x',
        method === 'POST' ? { body: 'payload', contentType: 'text/plain' } : {},
      )
      checkProblem(t, res, 502, 'upstream_unavailable', `${method} to a closed port`)
    }
  })

  t.test('a slow upstream is 504 upstream_timeout', async (t) => {
    const { res } = await reaches(t, slow, 'slow GET', () => send(gw, owner.apiKey, 'GET', '/slow/x'))
    checkProblem(t, res, 504, 'upstream_timeout', 'slow GET')
    t.notOk(answeredLate, 'the gateway answered before the upstream did')
  })

  t.test('a GET answered 503 reaches the upstream exactly once', async (t) => {
    for (const method of ['GET', 'HEAD', 'POST']) {
      const { res } = await reaches(t, flaky, `${method} answered 503`, () =>
        send(gw, owner.apiKey, method, '/flaky/x'),
      )
      t.equal(res.status, 503, `${method}: the client gets the upstream's 503`)
      if (method !== 'HEAD') t.equal(res.body, 'try later', `${method}: with its body`)
    }
  })

  t.test('a request whose connection dies is not retried', async (t) => {
    for (const method of ['POST', 'GET']) {
      const { res } = await reaches(t, resetting, `${method} reset after it arrived`, () =>
        send(
          gw,
          owner.apiKey,
          method,
          '/reset/x',
          method === 'POST' ? { body: 'once only', contentType: 'text/plain' } : {},
        ),
      )
      checkProblem(t, res, 502, 'upstream_unavailable', `${method} reset`)
    }
    for (const method of ['POST', 'PUT', 'GET']) {
      const before = slamming.connections()
      const res = await send(
        gw,
        owner.apiKey,
        method,
        '/slam/x',
        method === 'GET' ? {} : { body: 'once only', contentType: 'text/plain' },
      )
      checkProblem(t, res, 502, 'upstream_unavailable', `${method} to an upstream that closes every connection`)
      t.equal(slamming.connections() - before, 1, `${method}: one connection attempt, no retry`)
    }
  })
})

/** A chunked request (no Content-Length), written in `chunks` one after another. */
function chunkedRequest(
  gw: TestGateway,
  key: string,
  path: string,
  chunks: Buffer[],
  contentType: string,
): Promise<RawResponse> {
  const url = new URL(gw.url)
  return new Promise((resolve, reject) => {
    const request = httpRequest(
      {
        host: url.hostname,
        port: url.port,
        method: 'POST',
        path,
        agent: false,
        headers: { authorization: `Bearer ${key}`, 'content-type': contentType, 'transfer-encoding': 'chunked' },
      },
      (response) => {
        const parts: Buffer[] = []
        response.on('data', (chunk: Buffer) => parts.push(chunk))
        response.on('end', () => {
          const body = Buffer.concat(parts).toString('utf8')
          resolve({ status: response.statusCode!, headers: response.headers, body, json: () => JSON.parse(body) })
        })
        response.on('error', reject)
      },
    )
    // The gateway may answer (413) and close before the whole body is written.
    request.on('error', reject)
    let i = 0
    const next = () => {
      if (i === chunks.length) {
        request.end()
        return
      }
      const chunk = chunks[i++]!
      if (request.write(chunk)) setImmediate(next)
      else request.once('drain', next)
    }
    next()
  })
}

/** `total` random bytes in chunks of uneven sizes. */
function unevenChunks(total: number): Buffer[] {
  const chunks: Buffer[] = []
  let left = total
  let size = 1
  while (left > 0) {
    const n = Math.min(left, size)
    chunks.push(randomBytes(n))
    left -= n
    size = (size * 7 + 13) % 70_001
  }
  return chunks
}

t.test('request bodies stream through untouched', async (t) => {
  const upstream = await startUpstream(t)
  const gw = await startGateway(t, {
    upstreamUrl: upstream.url,
    gatewayConfig: { routes: [{ prefix: '/small', upstream: upstream.url, max_body_bytes: 1024 }] },
  })
  const owner = await gw.createParent()
  const { nothingReached } = counter([upstream])

  t.test('a 5 MB random upload arrives byte-exact', async (t) => {
    const body = randomBytes(5 * 1024 * 1024)
    const { res, got } = await reaches(t, upstream, '5 MB', () => send(gw, owner.apiKey, 'POST', '/upload', { body }))
    t.equal(res.status, 200)
    t.equal(got?.bodyBytes, body.length, 'length')
    t.equal(got?.bodySha256, sha256(body), 'sha256')
    t.equal(got?.headers['content-length'], String(body.length), 'Content-Length passed on')
    t.equal(got?.headers['content-type'], 'application/octet-stream', 'content type passed on')
  })

  t.test('a chunked body (no Content-Length) arrives byte-exact', async (t) => {
    const chunks = unevenChunks(3 * 1024 * 1024 + 17)
    const whole = Buffer.concat(chunks)
    const { res, got } = await reaches(t, upstream, 'chunked', () =>
      chunkedRequest(gw, owner.apiKey, '/chunked', chunks, 'application/octet-stream'),
    )
    t.equal(res.status, 200)
    t.equal(got?.bodyBytes, whole.length, 'length')
    t.equal(got?.bodySha256, sha256(whole), 'sha256')
    t.equal(got?.headers['content-length'], undefined, 'still no Content-Length')
  })

  t.test('a JSON body is not re-serialised', async (t) => {
    for (const body of [
      '{"a":1,   "b":2}',
      '{"b": 2, "a": 1.50, "a": 3}\n',
      '{not json at all',
      '  []  ',
      '{"__proto__": {"x": 1}}',
    ]) {
      for (const method of ['POST', 'PUT', 'PATCH', 'DELETE']) {
        const what = `${method} ${JSON.stringify(body)}`
        const { res, got } = await reaches(t, upstream, what, () =>
          send(gw, owner.apiKey, method, '/json', { body, contentType: 'application/json; charset=utf-8' }),
        )
        t.equal(res.status, 200, `${what}: 200`)
        t.equal(got?.bodySha256, sha256(body), `${what}: exactly those bytes`)
        t.equal(got?.bodyBytes, Buffer.byteLength(body), `${what}: length`)
        t.equal(got?.headers['content-type'], 'application/json; charset=utf-8', `${what}: content type unchanged`)
      }
    }
  })

  t.test("a body over the route's max_body_bytes is 413", async (t) => {
    for (const size of [1025, 2000, 64 * 1024]) {
      const what = `${size} bytes with Content-Length`
      const res = await nothingReached(t, what, () =>
        send(gw, owner.apiKey, 'POST', '/small/x', { body: randomBytes(size) }),
      )
      checkProblem(t, res, 413, 'payload_too_large', what)
    }
    const exact = randomBytes(1024)
    const { res, got } = await reaches(t, upstream, 'exactly the limit', () =>
      send(gw, owner.apiKey, 'POST', '/small/x', { body: exact }),
    )
    t.equal(res.status, 200, 'exactly max_body_bytes passes')
    t.equal(got?.bodySha256, sha256(exact), 'and arrives whole')

    const chunkedUnder = unevenChunks(1000)
    const under = await reaches(t, upstream, 'chunked under the limit', () =>
      chunkedRequest(gw, owner.apiKey, '/small/x', chunkedUnder, 'application/octet-stream'),
    )
    t.equal(under.res.status, 200, 'a chunked body under the limit passes')
    t.equal(under.got?.bodySha256, sha256(Buffer.concat(chunkedUnder)), 'and arrives whole')

    const before = upstream.received.length
    const over = await chunkedRequest(gw, owner.apiKey, '/small/x', unevenChunks(4000), 'application/octet-stream')
    checkProblem(t, over, 413, 'payload_too_large', 'a chunked body over the limit')
    // The rest of the body was never read: the connection must not be reused for another request
    // (Node's server closes it; this holds it to that).
    t.equal(over.headers.connection, 'close', 'the 413 closes the connection')
    t.equal(upstream.received.length, before, 'the upstream never received a whole request')
  })

  t.test('unusual content types pass through', async (t) => {
    const cases: [string | null, string][] = [
      ['text/csv', 'a,b\n1,2\n'],
      ['text/csv; charset=iso-8859-1', 'caf\xe9,1\n'],
      ['application/x-foo', '\u0000\u0001binary-ish'],
      [
        'multipart/form-data; boundary=xyz',
        '--xyz\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--xyz--\r\n',
      ],
      ['application/x-www-form-urlencoded', 'a=1&b=%20'],
      [null, 'no content type at all'],
    ]
    for (const [contentType, text] of cases) {
      for (const method of ['POST', 'PUT']) {
        const body = Buffer.from(text, 'latin1')
        const what = `${method} ${contentType ?? 'without a content type'}`
        const { res, got } = await reaches(t, upstream, what, () =>
          send(gw, owner.apiKey, method, '/typed', { body, contentType }),
        )
        t.equal(res.status, 200, `${what}: 200`)
        t.equal(got?.bodySha256, sha256(body), `${what}: body`)
        t.equal(got?.headers['content-type'], contentType ?? undefined, `${what}: content type`)
      }
    }
  })
})
