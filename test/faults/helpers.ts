// Fault injection for test/faults: each test owns what it breaks, so the machine's shared Postgres
// and Redis are never disturbed. A test starts its own redis-server (and kills or shuts it down,
// then starts it again on the same port), and puts a TCP relay between the gateway and Postgres
// (or Redis) that it can cut or blackhole: a real network fault, as the gateway sees one.
import { AsyncLocalStorage } from 'node:async_hooks'
import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import diagnostics from 'node:diagnostics_channel'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { request as httpRequest, type IncomingMessage } from 'node:http'
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { FastifyInstance } from 'fastify'
import { buildApp } from '../../src/app.js'
import { createParentWithKey, mintKey } from '../../src/auth/mint.js'
import type { CacheTimings } from '../../src/cache/index.js'
import { loadConfig } from '../../src/config.js'
import { loadRouteTable } from '../../src/proxy/route-table.js'
import { openStore, type Sql, type Store } from '../../src/store/db.js'
import { createSubAccount } from '../../src/store/tenants.js'
import { metricValue } from '../helpers/app.js'
import { ADMIN_URL } from '../helpers/db.js'
import type { RawResponse } from '../helpers/proxy.js'

interface TestLike {
  teardown(fn: () => unknown): void
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

// ---------------------------------------------------------------------------------------------
// Ports

/**
 * The kernel's ephemeral range: outgoing connections take their local port from it, so a port
 * in it that a test frees for a moment (to restart a server on it) may be taken meanwhile.
 */
function ephemeralRange(): [number, number] {
  try {
    const [low, high] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number)
    if (low !== undefined && high !== undefined && low > 0 && high >= low) return [low, high]
  } catch {
    // Not Linux: assume the IANA range.
  }
  return [49152, 65535]
}

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer()
    server.once('error', () => resolve(false))
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)))
  })
}

/**
 * A free port below the ephemeral range, for a server the test will stop and start again on the
 * same port: no outgoing connection of any process can be given it meanwhile.
 */
export async function stablePort(): Promise<number> {
  const [low] = ephemeralRange()
  const from = 20_000
  const to = Math.max(from + 1_000, low - 1)
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = from + Math.floor(Math.random() * (to - from))
    if (await canListen(port)) return port
  }
  throw new Error('no free port below the ephemeral range')
}

/** Listens on `port`, retrying for a moment if it is still held (a socket in the middle of closing). */
async function listenOn(server: Server, port: number): Promise<void> {
  const deadline = Date.now() + 5_000
  for (;;) {
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject)
        server.listen(port, '127.0.0.1', () => {
          server.off('error', reject)
          resolve()
        })
      })
      return
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EADDRINUSE' || Date.now() > deadline) throw err
      await sleep(50)
    }
  }
}

// ---------------------------------------------------------------------------------------------
// A redis-server of the test's own

export interface OwnRedis {
  port: number
  url: string
  /** Whether the server process is running. */
  running(): boolean
  /** SIGKILL: the server dies at once, as in a crash. */
  kill(): Promise<void>
  /** `redis-cli shutdown nosave`: an orderly stop. */
  shutdown(): Promise<void>
  /** Starts it again, empty, on the same port. */
  start(): Promise<void>
}

/** Resolves once something on `port` answers PING with PONG, or rejects after `ms`. */
async function answersPing(port: number, ms: number): Promise<void> {
  const deadline = Date.now() + ms
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1')
      let reply = ''
      const done = (value: boolean) => {
        socket.destroy()
        resolve(value)
      }
      socket.setTimeout(500, () => done(false))
      socket.once('error', () => done(false))
      socket.once('connect', () => socket.write('PING\r\n'))
      socket.on('data', (chunk) => {
        reply += chunk.toString('latin1')
        if (reply.includes('\r\n')) done(reply.startsWith('+PONG'))
      })
    })
    if (ok) return
    if (Date.now() > deadline) throw new Error(`redis on port ${port} did not answer PING within ${ms} ms`)
    await sleep(25)
  }
}

/**
 * Should this process die without its teardown (killed on a timeout), a watchdog kills the
 * server it started: a shell loop that ends as soon as either of the two is gone.
 */
function watchOver(serverPid: number): void {
  const script = `while kill -0 ${process.pid} 2>/dev/null && kill -0 ${serverPid} 2>/dev/null; do sleep 0.5; done; kill -0 ${process.pid} 2>/dev/null || kill -9 ${serverPid} 2>/dev/null; exit 0`
  spawn('/bin/sh', ['-c', script], { stdio: 'ignore', detached: true }).unref()
}

/**
 * `/usr/bin/redis-server --port N --save '' --appendonly no` on a port of its own, killed at
 * teardown. Nothing is written to disk (its working directory is a temporary one all the same).
 */
export async function startRedis(t: TestLike): Promise<OwnRedis> {
  const dir = mkdtempSync(join(tmpdir(), 'tgw-faults-redis-'))
  let child: ChildProcess | null = null
  let exited: Promise<void> = Promise.resolve()
  let port = 0

  async function launch(onPort: number): Promise<void> {
    let stderr = ''
    const proc = spawn(
      '/usr/bin/redis-server',
      ['--port', String(onPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--loglevel', 'warning'],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    )
    proc.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
    watchOver(proc.pid!)
    let gone = false
    exited = new Promise<void>((resolve) => proc.once('exit', () => ((gone = true), resolve())))
    child = proc
    try {
      await Promise.race([
        answersPing(onPort, 10_000),
        exited.then(() => {
          throw new Error(`redis-server exited at start on port ${onPort}: ${stderr.trim()}`)
        }),
      ])
    } catch (err) {
      if (!gone) proc.kill('SIGKILL')
      await exited
      child = null
      throw err
    }
  }

  // The port is chosen free, but something may take it before redis-server binds: try another.
  for (let attempt = 0; ; attempt++) {
    port = await stablePort()
    try {
      await launch(port)
      break
    } catch (err) {
      if (attempt >= 4) throw err
    }
  }

  const running = () => child !== null && child.exitCode === null && child.signalCode === null
  t.teardown(async () => {
    if (running()) child!.kill('SIGKILL')
    await exited
    rmSync(dir, { recursive: true, force: true })
  })

  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    running,
    async kill() {
      if (!running()) return
      child!.kill('SIGKILL')
      await exited
    },
    async shutdown() {
      if (!running()) return
      await new Promise<void>((resolve) => {
        // The command's own exit status is of no interest: the server's exit below is.
        execFile('/usr/bin/redis-cli', ['-p', String(port), 'shutdown', 'nosave'], () => resolve())
      })
      let timer: NodeJS.Timeout | undefined
      await Promise.race([exited, new Promise<void>((resolve) => (timer = setTimeout(resolve, 5_000)))])
      clearTimeout(timer)
      if (running()) {
        child!.kill('SIGKILL')
        await exited
      }
    },
    async start() {
      if (running()) return
      await launch(port)
    },
  }
}

// ---------------------------------------------------------------------------------------------
// A TCP relay that can fail like a network

export type RelayMode = 'pass' | 'blackhole' | 'cut'

export interface Relay {
  port: number
  mode(): RelayMode
  /**
   * A partition: every connection stays open, but nothing gets through in either direction, and
   * new connections are accepted and then hear nothing. As with TCP, bytes are held, not lost:
   * restore() delivers them (a short partition heals; nothing is silently corrupted).
   */
  blackhole(): void
  /**
   * The far end is gone: every connection is closed and new ones are refused. `fin` (the
   * default) closes them in order, `rst` resets them (a crashed host, a firewall that rejects).
   */
  cut(how?: 'fin' | 'rst'): Promise<void>
  /** Back to normal: held connections flow again, new ones are accepted and forwarded. */
  restore(): Promise<void>
  /**
   * The next connection that sends `pattern` (client to server) is closed right there, before
   * the chunk is forwarded: a connection lost in the middle of what it was doing. `rst` resets it
   * (a crashed peer, a NAT or firewall dropping state); `fin` closes it in order (a server that
   * shuts down or terminates the backend, a proxy closing it). Resolves once it happened. Other
   * connections are untouched, and new ones are forwarded as usual.
   */
  closeOn(pattern: string, how: 'rst' | 'fin'): Promise<void>
  /** Connections currently open through the relay. */
  open(): number
}

interface Pair {
  client: Socket
  remote: Socket | null
}

/** A relay on a port of its own to `target` (127.0.0.1), closed at teardown. */
export async function startRelay(t: TestLike, target: { host?: string; port: number }): Promise<Relay> {
  const host = target.host ?? '127.0.0.1'
  let mode: RelayMode = 'pass'
  const pairs = new Set<Pair>()

  function drop(pair: Pair, how: 'fin' | 'rst' = 'fin'): void {
    pairs.delete(pair)
    if (how === 'rst' && !pair.client.destroyed) pair.client.resetAndDestroy()
    else pair.client.destroy()
    pair.remote?.destroy()
  }

  let trap: { pattern: Buffer; how: 'rst' | 'fin'; sprung: () => void } | null = null

  function forward(pair: Pair): void {
    const remote = connect(target.port, host)
    pair.remote = remote
    pair.client.on('data', (chunk: Buffer) => {
      if (trap !== null && chunk.includes(trap.pattern)) {
        const { sprung, how } = trap
        trap = null
        drop(pair, how)
        sprung()
        return
      }
      remote.write(chunk)
    })
    remote.on('data', (chunk: Buffer) => pair.client.write(chunk))
    remote.on('error', () => drop(pair))
    remote.on('close', () => drop(pair))
    if (mode === 'blackhole') remote.pause()
  }

  const server = createServer((client) => {
    const pair: Pair = { client, remote: null }
    pairs.add(pair)
    client.on('error', () => drop(pair))
    client.on('close', () => drop(pair))
    if (mode === 'pass') forward(pair)
    else client.pause()
  })

  const port = await stablePort()
  await listenOn(server, port)
  let listening = true

  const relay: Relay = {
    port,
    mode: () => mode,
    blackhole() {
      mode = 'blackhole'
      for (const pair of pairs) {
        pair.client.pause()
        pair.remote?.pause()
      }
    },
    async cut(how = 'fin') {
      mode = 'cut'
      if (listening) {
        listening = false
        await new Promise<void>((resolve) => {
          server.close(() => resolve())
          for (const pair of [...pairs]) drop(pair, how)
        })
      }
      for (const pair of [...pairs]) drop(pair, how)
    },
    async restore() {
      const was = mode
      mode = 'pass'
      if (!listening) {
        await listenOn(server, port)
        listening = true
      }
      if (was !== 'blackhole') return
      for (const pair of pairs) {
        if (pair.remote === null) forward(pair)
        else pair.remote.resume()
        pair.client.resume()
      }
    },
    closeOn(pattern, how) {
      return new Promise<void>((resolve) => {
        trap = { pattern: Buffer.from(pattern), how, sprung: resolve }
      })
    },
    open: () => pairs.size,
  }

  t.teardown(async () => {
    for (const pair of [...pairs]) drop(pair)
    if (listening) await new Promise<void>((resolve) => server.close(() => resolve()))
  })
  return relay
}

// ---------------------------------------------------------------------------------------------
// A gateway on a relayed Postgres and on a Redis of the test's choosing

/** The test database's URL, pointed at `port` on 127.0.0.1 (a relay) instead. */
export function viaPort(databaseUrl: string, port: number): string {
  const url = new URL(databaseUrl)
  url.hostname = '127.0.0.1'
  url.port = String(port)
  return url.toString()
}

/** Where the tests' Postgres listens (the relay's target). */
export function postgresAddress(): { host: string; port: number } {
  const url = new URL(ADMIN_URL)
  return { host: url.hostname || '127.0.0.1', port: Number(url.port || 5432) }
}

export interface FaultGatewayOptions {
  /** Where the gateway's own pool connects (through a relay, usually). */
  databaseUrl: string
  /** Unset: in-process cache only. */
  redisUrl?: string
  redisKeyPrefix?: string
  upstreamUrl?: string
  gatewayConfig?: Record<string, unknown>
  cacheTimings?: Partial<CacheTimings>
  usageFlushIntervalMs?: number
  /** Restored before the gateway closes: its last usage flush needs Postgres. */
  relays?: Relay[]
}

export interface FaultGateway {
  app: FastifyInstance
  store: Store
  url: string
  port: number
  /**
   * A graceful stop as main.ts drains on SIGTERM (without its delay): draining (so that every
   * answer from now on says Connection: close), app.close() (in-flight requests finish, usage is
   * flushed), then the pool. Idempotent; teardown calls it too.
   */
  close(): Promise<void>
}

/**
 * The gateway as main.ts builds it, with the production store (openStore: a postgres.js pool
 * with its connect timeout) on `databaseUrl`, listening on port 0.
 */
export async function faultGateway(t: TestLike, options: FaultGatewayOptions): Promise<FaultGateway> {
  const store = await openStore({ databaseUrl: options.databaseUrl, dataDir: tmpdir() })
  const config = loadConfig({
    DATABASE_URL: options.databaseUrl,
    ...(options.redisUrl === undefined ? {} : { REDIS_URL: options.redisUrl }),
    ...(options.upstreamUrl === undefined ? {} : { UPSTREAM_URL: options.upstreamUrl }),
  })
  let app: FastifyInstance
  try {
    app = await buildApp({
      config,
      store,
      routes: loadRouteTable(options.gatewayConfig ?? {}, options.upstreamUrl),
      redisKeyPrefix: options.redisKeyPrefix ?? 'tgw_faults:',
      cacheTimings: options.cacheTimings,
      usageFlushIntervalMs: options.usageFlushIntervalMs,
      logger: false,
    })
  } catch (err) {
    await store.close()
    throw err
  }
  let closing: Promise<void> | null = null
  const close = () =>
    (closing ??= (async () => {
      for (const relay of options.relays ?? []) if (relay.mode() !== 'pass') await relay.restore()
      try {
        app.readiness.draining = true
        await app.close()
      } finally {
        await store.close()
      }
    })())
  t.teardown(close)
  await app.listen({ port: 0, host: '127.0.0.1' })
  const port = (app.server.address() as AddressInfo).port
  return { app, store, url: `http://127.0.0.1:${port}`, port, close }
}

// ---------------------------------------------------------------------------------------------
// Measuring

export function median(values: readonly number[]): number {
  if (values.length === 0) return NaN
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!
}

export const round = (ms: number) => Math.round(ms * 10) / 10

/** Resolves with `promise`'s value, or with `onTimeout` if it has not settled within `ms`. */
export async function orTimeout<T, U>(promise: Promise<T>, ms: number, onTimeout: U): Promise<T | U> {
  let timer: NodeJS.Timeout | undefined
  try {
    return await Promise.race([promise, new Promise<U>((resolve) => (timer = setTimeout(() => resolve(onTimeout), ms)))])
  } finally {
    clearTimeout(timer)
  }
}

// ---------------------------------------------------------------------------------------------
// Calls with a deadline

export interface Timed {
  /** The X-Request-Id sent (the gateway keeps it and answers with it). */
  requestId: string
  /** null: no answer within the limit (the request was then abandoned). */
  res: RawResponse | null
  ms: number
  /** The connection failed before an answer (its error code). */
  error: string | null
}

export interface CallOptions {
  method?: string
  path: string
  acting?: string
  json?: unknown
}

/**
 * callAs, on a fresh connection, timed from the first byte sent to the last byte received; a
 * request with no answer within `limitMs` is abandoned (its socket destroyed), so that a test
 * about a hang ends rather than hangs.
 */
export function timedCall(baseUrl: string, apiKey: string | null, options: CallOptions, limitMs: number): Promise<Timed> {
  const url = new URL(baseUrl)
  const requestId = `fault-${randomBytes(8).toString('hex')}`
  const headers: Record<string, string> = { 'x-request-id': requestId }
  if (apiKey !== null) headers.authorization = `Bearer ${apiKey}`
  if (options.acting !== undefined) headers['x-service-acting-tenant'] = options.acting
  let body: string | undefined
  if (options.json !== undefined) {
    body = JSON.stringify(options.json)
    headers['content-type'] = 'application/json'
    headers['content-length'] = String(Buffer.byteLength(body))
  }
  return new Promise((resolve) => {
    const start = performance.now()
    let settled = false
    const settle = (value: Omit<Timed, 'ms' | 'requestId'>) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      resolve({ ...value, requestId, ms: performance.now() - start })
    }
    const request = httpRequest(
      { host: url.hostname, port: url.port, method: options.method ?? 'GET', path: options.path, headers, agent: false },
      (response) => {
        const chunks: Buffer[] = []
        response.on('data', (chunk: Buffer) => chunks.push(chunk))
        response.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8')
          settle({ res: { status: response.statusCode!, headers: response.headers, body: text, json: () => JSON.parse(text) }, error: null })
        })
        response.on('error', (err: NodeJS.ErrnoException) => settle({ res: null, error: err.code ?? err.message }))
      },
    )
    const timer = setTimeout(() => {
      settle({ res: null, error: null })
      request.destroy()
    }, limitMs)
    request.on('error', (err: NodeJS.ErrnoException) => settle({ res: null, error: err.code ?? err.message }))
    request.end(body)
  })
}

/** The problem `code` of a response, or null. */
export function codeOf(res: RawResponse | null): string | null {
  if (res === null) return null
  try {
    return (res.json() as { code?: string }).code ?? null
  } catch {
    return null
  }
}

/** "503 store_unavailable in 4 ms", "no answer within 2000 ms", for messages. */
export function describeTimed(timed: Timed, limitMs?: number): string {
  if (timed.res === null) return timed.error === null ? `no answer within ${limitMs ?? round(timed.ms)} ms` : `connection failed: ${timed.error}`
  return `${timed.res.status} ${codeOf(timed.res) ?? ''} in ${round(timed.ms)} ms`.replace('  ', ' ')
}

// ---------------------------------------------------------------------------------------------
// Time spent waiting on Redis, per request, measured inside the gateway

/** The commands a lookup awaits; writes to Redis (a fill storing what it read) are not awaited. */
const READ_COMMANDS = new Set(['get', 'mget', 'hget', 'hmget', 'hgetall', 'exists'])

/** What one request spent on the Redis commands it awaited (reads: the cache lookups). */
export interface RedisWait {
  ms: number
  commands: number
}

const requestContext = new AsyncLocalStorage<RedisWait>()
let tracing = false

interface TraceContext {
  command?: string
  waitStart?: number
  wait?: RedisWait
}

/**
 * ioredis publishes every command on the `ioredis:command` tracing channel (diagnostics_channel);
 * each is timed here from the moment it is written to the moment its promise settles (answered,
 * failed or timed out), and added to the request that issued it. Commands refused at once (Redis
 * not connected, no offline queue) are not written, so not traced: they cost no wait.
 */
function traceRedisCommands(): void {
  if (tracing) return
  tracing = true
  diagnostics.tracingChannel<TraceContext, TraceContext>('ioredis:command').subscribe({
    start(context) {
      const wait = requestContext.getStore()
      if (wait === undefined || !READ_COMMANDS.has(context.command ?? '')) return
      context.wait = wait
      context.waitStart = performance.now()
    },
    end() {},
    asyncStart() {},
    error() {},
    asyncEnd(context) {
      if (context.wait === undefined || context.waitStart === undefined) return
      context.wait.ms += performance.now() - context.waitStart
      context.wait.commands++
    },
  })
}

/**
 * Starts measuring, for every request `app` serves from now on, the time it waited on Redis.
 * Returns the measurements by request id (the X-Request-Id the client sent).
 */
export function measureRedisWaits(app: FastifyInstance): Map<string, RedisWait> {
  traceRedisCommands()
  const waits = new Map<string, RedisWait>()
  // Before fastify's own listener: the request runs, to its end, in this context.
  // Keyed by the X-Request-Id the client sent (timedCall sends one), which the gateway keeps.
  app.server.prependListener('request', (request: IncomingMessage) => {
    const wait: RedisWait = { ms: 0, commands: 0 }
    requestContext.enterWith(wait)
    const id = request.headers['x-request-id']
    if (typeof id === 'string') waits.set(id, wait)
  })
  return waits
}

// ---------------------------------------------------------------------------------------------
// What would have crashed the gateway's process

export interface Crash {
  kind: 'uncaughtException' | 'unhandledRejection'
  message: string
  /** The first frames of its stack, to say where it came from. */
  where: string
}

/**
 * Records every uncaught exception and unhandled rejection in this process (the gateway runs
 * in it) instead of letting the first one end the test file unreported: a test asserts the list
 * is empty. (In production, main.ts's close-with-grace turns either into a shutdown.)
 */
export function watchCrashes(t: TestLike): Crash[] {
  const crashes: Crash[] = []
  const record = (kind: Crash['kind']) => (err: unknown) => {
    const error = err instanceof Error ? err : new Error(String(err))
    const where = (error.stack ?? '').split('\n').slice(1, 4).map((line) => line.trim().replace(/^at /, '')).join(' | ')
    crashes.push({ kind, message: `${(error as NodeJS.ErrnoException).code ?? error.name}: ${error.message}`, where })
  }
  const onException = record('uncaughtException')
  const onRejection = record('unhandledRejection')
  process.on('uncaughtException', onException)
  process.on('unhandledRejection', onRejection)
  t.teardown(() => {
    process.off('uncaughtException', onException)
    process.off('unhandledRejection', onRejection)
  })
  return crashes
}

// ---------------------------------------------------------------------------------------------
// Shared by the Redis fault tests (redis-down, redis-blackhole)

/** The bound on the time any request waits on Redis. */
export const REDIS_WAIT_BOUND_MS = 100
/** A revoke reaches every replica within this long (DESIGN §8). */
export const BUS_BOUND_MS = 1_000

/** `n` parent accounts, each with its key: a request with one asks for its key and its tenant. */
export async function parents(sql: Sql, n: number): Promise<{ id: string; apiKey: string }[]> {
  const out: { id: string; apiKey: string }[] = []
  for (let i = 0; i < n; i++) {
    const { account, key } = await sql.begin((tx) => createParentWithKey(tx, { name: `p${i}`, externalId: null, extraScopes: [] }))
    out.push({ id: account.id, apiKey: key.apiKey })
  }
  return out
}

export interface SubWithKey {
  /** The parent's key, which may revoke the sub-account's. */
  parentKey: string
  subId: string
  keyId: string
  apiKey: string
}

/** A parent, a sub-account and its key, made in Postgres only (no invalidation message is sent). */
export async function subWithKey(sql: Sql): Promise<SubWithKey> {
  const { account: parent, key: parentKey } = await sql.begin((tx) => createParentWithKey(tx, { name: 'bus', externalId: null, extraScopes: [] }))
  const sub = await createSubAccount(sql, parent.id, { name: 'bus', externalId: null, metadata: {} })
  const key = await mintKey(sql, { tenantId: sub.id, name: 'bus', scopes: [], withClientSecret: false })
  return { parentKey: parentKey.apiKey, subId: sub.id, keyId: key.row.id, apiKey: key.apiKey }
}

/** The gateway's store lookups and Redis failures so far, from its metrics. */
export async function storeLookups(gw: FaultGateway): Promise<{ postgres: number; redis: number; errors: number; redisMisses: number }> {
  return {
    postgres: await metricValue(gw.app, 'tgw_store_lookups_total', { tier: 'postgres' }),
    redis: await metricValue(gw.app, 'tgw_store_lookups_total', { tier: 'redis' }),
    errors: await metricValue(gw.app, 'tgw_redis_errors_total'),
    redisMisses: await metricValue(gw.app, 'tgw_cache_misses_total', { tier: 'redis' }),
  }
}
