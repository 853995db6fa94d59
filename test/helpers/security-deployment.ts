// The deployment the security-matrix files attack, and the tools their cases share: two replicas
// (A and B) of one deployment behind a scoped route, a catch-all and an upstream that answers with
// hop-by-hop headers; an owner with a sub-account, a stranger with one and its key; raw requests
// with a marker, the refusal every case checks, request smuggling and a brute-force flood.
//
// Importing this module starts the deployment on the importing file's root test (a tap file is a
// process of its own), so every security-matrix-*.test.ts has its own replicas, database, Redis
// key prefix and upstreams on ports of its own, and they can run side by side.
//
// Requests that must arrive byte for byte go over a raw socket (test/helpers/hostile.ts); every
// case checks what the recording upstreams received, by the unique X-Request-Id it sent.
import { createServer, request as httpRequest, Agent } from 'node:http'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import { generateApiKey } from '../../src/auth/key-format.js'
import { metricValue, type TestGateway, startReplicas } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import type { JsonBody } from '../helpers/json.js'
import { sleep } from '../helpers/poll.js'
import {
  isParserRefusal,
  nextMarker,
  problemIssue,
  rawExchange,
  recordingUpstream,
  requestBytes,
  type HeaderLines,
  type RawExchange,
} from '../helpers/hostile.js'

// ---------------------------------------------------------------------------------------------
// Two replicas (A and B) of one deployment, sharing Postgres and a Redis prefix, with default
// cache timings: a record stays 5 s in a replica's own cache, so a refusal within 1 s on B can
// only come from the invalidation bus.

export const catchAll = await recordingUpstream(t, 'catch-all')
export const shipments = await recordingUpstream(t, 'shipments')
// An upstream whose answers carry hop-by-hop headers of its own, one of them named by Connection,
// and a request id of its own.
export const hopByHop = createServer((_request, response) => {
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
export const routes = {
  routes: [
    {
      prefix: '/v1/shipments',
      upstream: shipments.url,
      scopes: { read: ['tracking:read'], write: ['tracking:write'] },
    },
    { prefix: '/hop', upstream: `http://127.0.0.1:${(hopByHop.address() as AddressInfo).port}` },
  ],
}
export const [a, b] = (await startReplicas(t, 2, { upstreamUrl: catchAll.url, gatewayConfig: routes })) as [
  TestGateway,
  TestGateway,
]
export const portA = Number(new URL(a.url).port)

/** When the last change went through the management API (its invalidation is sent again 1 s later). */
export let lastChangeAt = 0

/** Until the repeat of the last change's invalidation (1 s after it) is over. */
export const afterRepeatedInvalidations = () =>
  new Promise((resolve) => setTimeout(resolve, Math.max(0, lastChangeAt + 1500 - Date.now())))

export async function manage(
  gw: TestGateway,
  key: string,
  method: string,
  path: string,
  json?: unknown,
): Promise<JsonBody> {
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

export const owner = await a.createParent()
export const stranger = await a.createParent()
export const ownSub = await manage(a, owner.apiKey, 'POST', '/v1/sub-accounts', {
  name: 'Acme EU',
  external_id: 'acme-eu',
})
export const foreignSub = await manage(a, stranger.apiKey, 'POST', '/v1/sub-accounts', {
  name: 'Foreign',
  external_id: 'foreign-only',
})
export const foreignSubKey = await manage(a, stranger.apiKey, 'POST', `/v1/sub-accounts/${foreignSub.id}/api-keys`, {
  name: 'k',
  scopes: ['tracking:read'],
})
export const ownerKeyId = (
  (await a.database.sql`select id from api_keys where tenant_id = ${owner.id}`)[0] as { id: string }
).id

export const received = (marker: string) => catchAll.byMarker(marker).length + shipments.byMarker(marker).length

/** One request over a raw socket, with a marker; the whole exchange (every response on it). */
export function raw(
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

export const auth = (key: string): [string, string] => ['Authorization', `Bearer ${key}`]

/** Asserts a refusal: the status and code, problem+json with the request id, and no upstream got it. */
export async function refused(
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

export const SMUGGLED = '/smuggled-request'
export const smuggledArrived = () =>
  [...catchAll.received, ...shipments.received].filter((r) => r.url.startsWith(SMUGGLED)).length

/**
 * Sends an ambiguously framed request with a second one behind its body: one answer, `status`
 * (501 for a coding the gateway does not decode), the connection closed, the second never served.
 */
export async function smuggle(t: Test, framing: HeaderLines, body: string, status: 400 | 501 = 400): Promise<void> {
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
  t.equal(exchange.responses[0]?.status, status, `the ambiguous request is refused with ${status}`)
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

export const counter = (gw: TestGateway, name: string, tier: string) => metricValue(gw.app, name, { tier })
export const storeLookups = async (gw: TestGateway) => ({
  postgres: await counter(gw, 'tgw_store_lookups_total', 'postgres'),
  redis: await counter(gw, 'tgw_store_lookups_total', 'redis'),
  localMisses: await counter(gw, 'tgw_cache_misses_total', 'local'),
})

/** `tgw_` + 43 random base62 characters + their 6-character base62 CRC32 (README "Keys"): known to no store. */
export const randomWellFormedKey = () => generateApiKey().apiKey

/** Sends `keys` to A over keep-alive connections, `concurrency` at a time; returns the statuses. */
export async function flood(keys: string[], concurrency = 8): Promise<number[]> {
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
