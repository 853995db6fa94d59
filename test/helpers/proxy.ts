// The proxy over real sockets: a recording upstream on port 0, gateways listening on port 0 on a
// fresh database and a Redis key prefix of their own, and a raw HTTP client that sends headers
// and paths exactly as written (fetch would normalise both).
import { createHash, randomBytes } from 'node:crypto'
import { createServer, request as httpRequest, type Agent, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo, Server as NetServer, Socket } from 'node:net'
import { Redis } from 'ioredis'
import type { Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { buildApp, type AppDeps } from '../../src/app.js'
import type { CacheTimings } from '../../src/cache/index.js'
import { createParentWithKey, mintKey } from '../../src/auth/mint.js'
import { loadConfig } from '../../src/config.js'
import { loadRouteTable } from '../../src/proxy/route-table.js'
import type { Store } from '../../src/store/db.js'
import { freshDatabase, type TestDatabase } from './db.js'
import { metricValue, type Parent } from './app.js'

export const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379'

interface TestLike {
  teardown(fn: () => unknown): void
}

export interface ReceivedRequest {
  method: string
  url: string
  headers: IncomingHttpHeaders
  rawHeaders: string[]
  bodyBytes: number
  bodySha256: string
}

export type UpstreamHandler = (request: IncomingMessage, response: ServerResponse, received: ReceivedRequest) => void

export interface Upstream {
  url: string
  port: number
  /** Every request the upstream received, in order, with its whole body hashed. */
  received: ReceivedRequest[]
  /** Replaces how the upstream answers (default: 200 with the received request as JSON). */
  answer(handler: UpstreamHandler): void
  close(): Promise<void>
}

export const echo: UpstreamHandler = (_request, response, received) => {
  response.writeHead(200, { 'content-type': 'application/json' })
  response.end(JSON.stringify(received))
}

export async function startUpstream(t: TestLike, handler: UpstreamHandler = echo): Promise<Upstream> {
  const received: ReceivedRequest[] = []
  let current = handler
  const server = createServer((request, response) => {
    const hash = createHash('sha256')
    let bodyBytes = 0
    request.on('data', (chunk: Buffer) => {
      bodyBytes += chunk.length
      hash.update(chunk)
    })
    request.on('end', () => {
      const entry: ReceivedRequest = {
        method: request.method!,
        url: request.url!,
        headers: request.headers,
        rawHeaders: request.rawHeaders,
        bodyBytes,
        bodySha256: hash.digest('hex'),
      }
      received.push(entry)
      current(request, response, entry)
    })
  })
  const { port, close } = await listenOnLoopback(t, server)
  return { url: `http://127.0.0.1:${port}`, port, received, answer: (h) => (current = h), close }
}

/**
 * Listens on 127.0.0.1 on a port of its own; `close` (also run at teardown) ends every
 * connection and then the server. `connections` are the ones open now.
 */
export async function listenOnLoopback(t: TestLike, server: NetServer): Promise<{ port: number; close: () => Promise<void>; connections: ReadonlySet<Socket> }> {
  const connections = new Set<Socket>()
  server.on('connection', (socket: Socket) => {
    connections.add(socket)
    socket.once('close', () => connections.delete(socket))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const close = () =>
    new Promise<void>((resolve) => {
      for (const socket of connections) socket.destroy()
      server.close(() => resolve())
    })
  t.teardown(close)
  return { port: (server.address() as AddressInfo).port, close, connections }
}

/** A port nothing listens on (bound, then released). */
export async function closedPort(): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  await new Promise((resolve) => server.close(resolve))
  return port
}

/** A Redis prefix of its own per test file, whose keys are deleted afterwards. */
export function redisPrefix(t: TestLike): string {
  const prefix = `tgw_test_${randomBytes(6).toString('hex')}:`
  t.teardown(async () => {
    const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 })
    try {
      const keys = await redis.keys(`${prefix}*`)
      if (keys.length > 0) await redis.del(...keys)
    } finally {
      redis.disconnect()
    }
  })
  return prefix
}

export interface LiveGatewayOptions {
  /** The GATEWAY_CONFIG document (routes etc.). */
  gatewayConfig?: Record<string, unknown>
  upstreamUrl?: string
  /** Share a database (and Redis prefix) with another gateway: two replicas of one deployment. */
  database?: TestDatabase
  redisKeyPrefix?: string
  /** false: no Redis at all (in-process cache only). */
  redis?: boolean
  cacheTimings?: Partial<CacheTimings>
  usageFlushIntervalMs?: number
  /** Passed to buildApp: a pino instance lets a test capture every line (default: no logging). */
  logger?: AppDeps['logger']
}

export interface LiveGateway {
  app: FastifyInstance
  /** http://127.0.0.1:<port> */
  url: string
  database: TestDatabase
  redisKeyPrefix: string
  createParent(options?: { scopes?: string[] }): Promise<Parent>
}

/** tgw_recent_admissions_total: requests a gateway admitted from its memory of the last second. */
export async function recentAdmissions(gateway: LiveGateway): Promise<number> {
  return metricValue(gateway.app, 'tgw_recent_admissions_total')
}

export async function liveGateway(t: TestLike, options: LiveGatewayOptions = {}): Promise<LiveGateway> {
  const database = options.database ?? (await freshDatabase(t))
  const redisKeyPrefix = options.redisKeyPrefix ?? redisPrefix(t)
  const config = loadConfig({
    DATABASE_URL: database.url,
    ...(options.redis === false ? {} : { REDIS_URL }),
    ...(options.upstreamUrl === undefined ? {} : { UPSTREAM_URL: options.upstreamUrl }),
  })
  const store: Store = { sql: database.sql, embedded: false, close: async () => {} }
  const app = await buildApp({
    config,
    store,
    routes: loadRouteTable(options.gatewayConfig ?? {}, options.upstreamUrl),
    redisKeyPrefix,
    cacheTimings: options.cacheTimings,
    usageFlushIntervalMs: options.usageFlushIntervalMs,
    logger: options.logger,
  })
  t.teardown(() => app.close())
  await app.listen({ port: 0, host: '127.0.0.1' })
  const port = (app.server.address() as AddressInfo).port

  async function createParent(parentOptions: { scopes?: string[] } = {}): Promise<Parent> {
    return database.sql.begin(async (tx) => {
      const { account, key } = await createParentWithKey(tx, { name: 'parent', externalId: null, extraScopes: [] })
      if (parentOptions.scopes === undefined) return { id: account.id, apiKey: key.apiKey }
      const scoped = await mintKey(tx, { tenantId: account.id, name: 'scoped', scopes: parentOptions.scopes, withClientSecret: false })
      return { id: account.id, apiKey: scoped.apiKey }
    })
  }

  return { app, url: `http://127.0.0.1:${port}`, database, redisKeyPrefix, createParent }
}

export interface RawResponse {
  status: number
  headers: IncomingHttpHeaders
  body: string
  json(): any
}

export interface RawRequest {
  method?: string
  /** Sent exactly as written: no normalisation of dots, slashes or encodings. */
  path: string
  /** Name/value pairs, sent in this order and case; a name may repeat. */
  headers?: [string, string][]
  body?: string | Buffer
}

/** One request over a fresh connection, with headers and path exactly as given. */
export function rawRequest(baseUrl: string, options: RawRequest): Promise<RawResponse> {
  const url = new URL(baseUrl)
  const flat: string[] = []
  const given = options.headers ?? []
  // Node adds no Host header when headers are given as a list: add one unless the test did.
  if (!given.some(([name]) => name.toLowerCase() === 'host')) flat.push('Host', url.host)
  for (const [name, value] of given) flat.push(name, value)
  return new Promise((resolve, reject) => {
    const request = httpRequest(
      { host: url.hostname, port: url.port, method: options.method ?? 'GET', path: options.path, headers: flat, agent: false },
      (response) => {
        const chunks: Buffer[] = []
        response.on('data', (chunk: Buffer) => chunks.push(chunk))
        response.on('end', () => {
          const body = Buffer.concat(chunks).toString('utf8')
          resolve({ status: response.statusCode!, headers: response.headers, body, json: () => JSON.parse(body) })
        })
        response.on('error', reject)
      },
    )
    request.on('error', reject)
    request.end(options.body)
  })
}

/** Shorthand: a request as `apiKey`, optionally acting as `acting`, with extra headers. */
export function callAs(
  baseUrl: string,
  apiKey: string | null,
  options: { method?: string; path: string; acting?: string; headers?: [string, string][]; body?: string | Buffer; json?: unknown },
): Promise<RawResponse> {
  const headers: [string, string][] = []
  if (apiKey !== null) headers.push(['Authorization', `Bearer ${apiKey}`])
  if (options.acting !== undefined) headers.push(['X-Service-Acting-Tenant', options.acting])
  let body = options.body
  if (options.json !== undefined) {
    headers.push(['Content-Type', 'application/json'])
    body = JSON.stringify(options.json)
  }
  if (body !== undefined) headers.push(['Content-Length', String(Buffer.byteLength(body))])
  headers.push(...(options.headers ?? []))
  return rawRequest(baseUrl, { method: options.method, path: options.path, headers, body })
}

export const sha256 = (data: string | Buffer) => createHash('sha256').update(data).digest('hex')

/** Checks the problem+json envelope (DESIGN §7) of a refusal and returns its body. */
export function checkProblem(t: Test, res: RawResponse, status: number, code: string, what: string): Record<string, unknown> {
  t.equal(res.status, status, `${what}: status ${status} (${res.body.slice(0, 200)})`)
  t.match(String(res.headers['content-type']), /^application\/problem\+json/, `${what}: problem+json`)
  let body: Record<string, unknown> = {}
  try {
    body = res.json()
  } catch {
    t.fail(`${what}: body is not JSON: ${res.body}`)
  }
  t.equal(body.code, code, `${what}: code`)
  t.equal(body.status, status, `${what}: status in body`)
  t.equal(body.request_id, res.headers['x-request-id'], `${what}: request_id is the response's X-Request-Id`)
  return body
}

/** Polls `check` until it returns true or `withinMs` passed; returns the time it took, or null. */
export async function within(withinMs: number, check: () => Promise<boolean>, everyMs = 20): Promise<number | null> {
  const start = Date.now()
  for (;;) {
    if (await check()) return Date.now() - start
    if (Date.now() - start > withinMs) return null
    await new Promise((resolve) => setTimeout(resolve, everyMs))
  }
}

export interface AgentResponse {
  status: number
  headers: IncomingHttpHeaders
  body: Buffer
  /** Node saw the whole message (as framed); rejects instead on a connection error. */
  complete: boolean
}

/** One GET over `agent` (keep-alive clients of a test), read to its end. */
export function getOverAgent(base: string, agent: Agent, path: string, headers: Record<string, string>): Promise<AgentResponse> {
  const url = new URL(base)
  return new Promise((resolve, reject) => {
    const request = httpRequest({ host: url.hostname, port: url.port, path, agent, headers }, (response) => {
      const chunks: Buffer[] = []
      response.on('data', (chunk: Buffer) => chunks.push(chunk))
      response.on('error', reject)
      response.on('end', () => resolve({ status: response.statusCode!, headers: response.headers, body: Buffer.concat(chunks), complete: response.complete }))
    })
    request.on('error', reject)
    request.end()
  })
}
