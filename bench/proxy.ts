// Throughput and latency of the proxied path, gateway against a bare fastify proxy, run by hand:
//   npm run bench:proxy     (env: BENCH_DURATION=5 s, BENCH_CONNECTIONS=50, BENCH_ROUNDS=6,
//                            BENCH_WARMUP=5 s, BENCH_WARMUP_ROUNDS=2, BENCH_DATABASE_URL=postgres://…/postgres,
//                            BENCH_REDIS_URL=redis://127.0.0.1:6379, BENCH_SERVER_NODE_ARGS=
//                            extra node flags for both proxies, after the image's (which both get),
//                            e.g. '--cpu-prof --cpu-prof-dir=/tmp/prof' or '--no-allocation-site-pretenuring',
//                            BENCH_GATEWAY_RUNTIME=dist: the gateway compiled as the image runs it
//                            (tsc into a temporary directory, node with the flags of the Dockerfile's CMD),
//                            or tsx: from src/ under tsx, which costs every closure made per request
//                            a naming call the image never makes,
//                            BENCH_BASELINE_TREE= another checkout (its node_modules installed), whose
//                            gateway runs as a third side, "baseline", on the same database and Redis:
//                            a change measured against the code before it in the same run, e.g.
//                            git worktree add /tmp/base HEAD~1 && ln -s $PWD/node_modules /tmp/base/;
//                            BENCH_BARE_HEADERS=same: the bare proxy gets the gateway's request, Authorization
//                            and acting header included (none: no headers, as before 14f9851),
//                            BENCH_BASELINE_RUNTIME= how the baseline runs, by default as the gateway:
//                            BENCH_BASELINE_TREE=. BENCH_BASELINE_RUNTIME=tsx compares the two ways,
//                            BENCH_GATEWAY_OUTPUT= a file for everything the gateway writes (its
//                            log, and what BENCH_SERVER_NODE_ARGS=--trace-gc prints),
//                            BENCH_NODE=image: the servers run on the Node of the Dockerfile's NODE_IMAGE,
//                            fetched once from the npm registry (bench/lib.ts serverNode); current: on
//                            this process's node; or a path to a node binary)
// Every server runs in its own child process, so none shares an event loop with the load
// generator (autocannon, in this process): the upstream (node:http), the bare proxy (fastify +
// @fastify/http-proxy, no auth) and the gateway (compiled, as the image runs it; real Postgres and
// Redis). Both proxies forward to the same upstream. The sides alternate, bare/gateway/bare/…,
// and the medians over the rounds are reported, so that a slow patch of a noisy machine does not
// land on one side only. The figures worth comparing between runs are the gateway/bare ratios.
// With the gateway's metrics port up, it also shows how many key/tenant lookups went to Redis or
// Postgres once warm, and for how many of them a request waited (the target is none: entries in
// use are refreshed in the background).
import { spawn, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { createWriteStream, rmSync } from 'node:fs'
import http from 'node:http'
import { createRequire } from 'node:module'
import { type AddressInfo } from 'node:net'
import os from 'node:os'
import { resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import postgres from 'postgres'
import {
  ADMIN_URL,
  announce as announceTo,
  bareHeaders,
  bareHeadersMode,
  buildDist,
  captureOutput,
  children,
  cpuSeconds,
  envForCommand,
  fmt,
  forkChild,
  freePorts,
  gatewayArgs,
  gatewayRuntime,
  type GatewayRuntime,
  gitDescription,
  imageNodeFlags,
  median,
  packageVersion,
  percentile,
  positiveInt,
  PROXIED_PATH,
  REDIS_URL,
  ROOT,
  runCli,
  serverNode,
  type ServerNode,
  sleep,
  stopChild,
  SUB_EXTERNAL_ID,
  UPSTREAM_BODY,
  waitForGateway as waitForGatewayUntil,
} from './lib.js'

const SELF = fileURLToPath(import.meta.url)
/** The upstream answers this path with the headers it received, for the pre-flight check. */
const ECHO_PATH = '/v1/things/echo'

// ---------------------------------------------------------------------------------------------
// Children: `tsx bench/proxy.ts upstream` and `tsx bench/proxy.ts bare`, started by fork().
// Each reports its port over IPC and exits when the parent goes away.

interface UpstreamStats {
  type: 'stats'
  connections: number
  /** Requests that carried X-Service-Caller-Tenant, i.e. came through the gateway. */
  fromGateway: number
  fromOthers: number
}

function announce(port: number): void {
  announceTo(port, 'bench/proxy.ts')
}

async function runUpstream(): Promise<void> {
  const body = Buffer.from(UPSTREAM_BODY)
  let connections = 0
  let fromGateway = 0
  let fromOthers = 0
  const server = http.createServer((req, res) => {
    if (req.headers['x-service-caller-tenant'] !== undefined) fromGateway++
    else fromOthers++
    if (req.url === ECHO_PATH) {
      const echo = Buffer.from(JSON.stringify(req.headers))
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': echo.length })
      res.end(echo)
      return
    }
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length })
    res.end(body)
  })
  // Longer than a round, so that neither proxy's pool sees its idle sockets closed between rounds.
  server.keepAliveTimeout = 120_000
  server.on('connection', () => connections++)
  process.on('message', (message: { type?: string }) => {
    if (message.type === 'stats') process.send?.({ type: 'stats', connections, fromGateway, fromOthers } satisfies UpstreamStats)
  })
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done))
  announce((server.address() as AddressInfo).port)
}

async function runBare(upstream: string): Promise<void> {
  const { default: Fastify } = await import('fastify')
  const { default: httpProxy } = await import('@fastify/http-proxy')
  const app = Fastify({ logger: false })
  await app.register(httpProxy, { upstream })
  await app.listen({ host: '127.0.0.1', port: 0 })
  announce((app.server.address() as AddressInfo).port)
}

// ---------------------------------------------------------------------------------------------
// The parent.

// autocannon ships no types; this is the part of its API used here.
interface AutocannonResult {
  duration: number
  errors: number
  timeouts: number
  mismatches: number
  non2xx: number
  '2xx': number
  statusCodeStats: Record<string, { count: number }>
  requests: { total: number; sent: number }
}
interface AutocannonInstance {
  on(event: 'response', listener: (client: unknown, status: number, bytes: number, ms: number) => void): void
  stop(): void
}
type Autocannon = (
  opts: { url: string; connections: number; duration: number; headers: Record<string, string>; expectBody: string },
  cb: (err: Error | null, result: AutocannonResult) => void,
) => AutocannonInstance
// Loaded on first use, so that the children do not load it.
let autocannon: Autocannon | null = null

const DURATION = positiveInt('BENCH_DURATION', 5)
const CONNECTIONS = positiveInt('BENCH_CONNECTIONS', 50)
const ROUNDS = positiveInt('BENCH_ROUNDS', 6)
const WARMUP = positiveInt('BENCH_WARMUP', 5)
/**
 * Warm-up rounds, alternating like the measured ones. Two: with one (of 2 or 6 s), the gateway's
 * first measured round was its slowest of six in 13 of 14 runs, 15–40% above the others, with V8's
 * worker threads busy (0.5 s of CPU in that round against almost none in later ones); the bare
 * proxy's in 7 of 14. After a second warm-up round, or a 40-s pause, it was not.
 */
const WARMUP_ROUNDS = positiveInt('BENCH_WARMUP_ROUNDS', 2)
/** A file that gets all the gateway writes, e.g. with BENCH_SERVER_NODE_ARGS=--trace-gc. */
const GATEWAY_OUTPUT = process.env.BENCH_GATEWAY_OUTPUT || undefined
const SERVER_NODE_ARGS = (process.env.BENCH_SERVER_NODE_ARGS ?? '').split(' ').filter((arg) => arg !== '')
const BASELINE_TREE = process.env.BENCH_BASELINE_TREE || null
const GATEWAY_RUNTIME = gatewayRuntime('BENCH_GATEWAY_RUNTIME', 'dist')
const BASELINE_RUNTIME = gatewayRuntime('BENCH_BASELINE_RUNTIME', GATEWAY_RUNTIME)
/** The bare proxy runs with the gateway's V8 flags, so that the two differ by their code only. */
const BARE_NODE_ARGS = [...imageNodeFlags(ROOT), ...SERVER_NODE_ARGS]
/** The node arguments each gateway was started with, for the report. */
const commandLines: { gateway?: string; baseline?: string } = {}
/** The servers' node, for the report. */
let servedBy = '?'

// Ctrl-C stops the running load and leads to the cleanup below; a second one kills at once.
let interrupted = false
let running: AutocannonInstance | null = null
function onSignals(): void {
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      interrupted = true
      console.error(`\n${signal}: stopping and cleaning up (again to kill at once)…`)
      running?.stop()
    })
  }
}
function checkInterrupted(): void {
  if (interrupted) throw new Error('interrupted')
}

/** Forks this file in a role and waits for the port it reports. */
async function forkRole(role: 'upstream' | 'bare', args: string[], node: ServerNode): Promise<{ child: ChildProcess; port: number }> {
  const nodeArgs = role === 'bare' ? BARE_NODE_ARGS : []
  return forkChild(SELF, role, [role, ...args], { nodeArgs, node: node.path })
}

async function waitForGateway(base: string, gateway: ChildProcess, output: () => string): Promise<void> {
  return waitForGatewayUntil(base, gateway, output, checkInterrupted)
}

interface Side {
  name: 'bare' | 'gateway' | 'baseline'
  url: string
  headers: Record<string, string>
  /** The server process, whose CPU time each round reads. */
  pid: number | undefined
}

interface Round {
  side: Side['name']
  round: string
  completed: number
  perSecond: number
  p50: number
  p99: number
  /** CPU time (user + system) the side's server process spent per request; NaN off Linux. */
  cpuMicros: number
}

/**
 * One autocannon run. Latencies are recorded here, in float milliseconds, because autocannon's
 * own histogram keeps whole milliseconds, too coarse for sub-millisecond differences.
 * Anything but a 2xx carrying the upstream's body fails the bench.
 */
async function load(side: Side, seconds: number, round: string): Promise<Round> {
  checkInterrupted()
  let latencies = new Float64Array(1 << 18)
  let n = 0
  const cpuBefore = cpuSeconds(side.pid)
  const result = await new Promise<AutocannonResult>((done, fail) => {
    autocannon ??= createRequire(import.meta.url)('autocannon') as Autocannon
    running = autocannon(
      { url: side.url + PROXIED_PATH, connections: CONNECTIONS, duration: seconds, headers: side.headers, expectBody: UPSTREAM_BODY },
      (err, res) => (err ? fail(err) : done(res)),
    )
    running.on('response', (_client, _status, _bytes, ms) => {
      if (n === latencies.length) {
        const grown = new Float64Array(latencies.length * 2)
        grown.set(latencies)
        latencies = grown
      }
      latencies[n++] = ms
    })
  })
  running = null
  const cpuUsed = cpuSeconds(side.pid) - cpuBefore
  checkInterrupted()
  if (result.non2xx > 0 || result.errors > 0 || result.timeouts > 0 || result.mismatches > 0 || n === 0) {
    const codes = Object.entries(result.statusCodeStats)
      .map(([code, { count }]) => `${code}×${count}`)
      .join(', ')
    throw new Error(
      `${side.name} ${round}: ${result['2xx']} 2xx, ${result.non2xx} non-2xx (${codes}), ${result.errors} errors, ` +
        `${result.timeouts} timeouts, ${result.mismatches} bodies other than ${UPSTREAM_BODY}`,
    )
  }
  const sorted = latencies.subarray(0, n).sort()
  const res: Round = {
    side: side.name,
    round,
    completed: result.requests.total,
    perSecond: result.requests.total / result.duration,
    p50: percentile(sorted, 0.5),
    p99: percentile(sorted, 0.99),
    cpuMicros: (cpuUsed * 1e6) / result.requests.total,
  }
  console.error(
    `  ${side.name} ${round}: ${res.perSecond.toFixed(0)} req/s, p50 ${res.p50.toFixed(3)} ms, p99 ${res.p99.toFixed(3)} ms, ` +
      `${res.cpuMicros.toFixed(1)} µs CPU/request`,
  )
  return res
}

/** Counters besides the store lookups, shown when the gateway exports them. */
const EXTRA_COUNTERS = ['tgw_proxied_requests_total', 'tgw_cache_hits_total', 'tgw_cache_refreshes_total', 'tgw_redis_errors_total'] as const

interface StoreCounters {
  redis: number
  postgres: number
  /** Reads the in-process cache could not answer: each made a request wait for Redis or Postgres. */
  waited: number
  /** Each counter's sum over its series; absent when not exported. */
  extra: Partial<Record<(typeof EXTRA_COUNTERS)[number], number>>
  /** Garbage collection by kind (minor, major, incremental…): seconds and count so far. */
  gc: Record<string, { seconds: number; count: number }>
}

function noCounters(): StoreCounters {
  return { redis: 0, postgres: 0, waited: 0, extra: {}, gc: {} }
}

/** null: the metrics port does not answer, or tgw_store_lookups_total is not exported. */
async function readCounters(port: number): Promise<StoreCounters | null> {
  let text: string
  try {
    const response = await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(3000) })
    if (!response.ok) return null
    text = await response.text()
  } catch {
    return null
  }
  // A counter with labels has no series until its first increment, but its TYPE line is there.
  const declared = (name: string) => new RegExp(`^# TYPE ${name} counter$`, 'm').test(text)
  if (!declared('tgw_store_lookups_total')) return null
  const counters = noCounters()
  for (const name of EXTRA_COUNTERS) if (declared(name)) counters.extra[name] = 0
  for (const line of text.split('\n')) {
    const match = /^((?:tgw|nodejs)_\w+)(\{[^}]*\})?\s+(\S+)/.exec(line)
    if (match === null) continue
    const [, name, labels, raw] = match
    const value = Number(raw)
    if (name === 'tgw_store_lookups_total') {
      const tier = /tier="([^"]*)"/.exec(labels ?? '')?.[1]
      if (tier === 'redis') counters.redis += value
      else if (tier === 'postgres') counters.postgres += value
    } else if (name === 'tgw_cache_misses_total') {
      if (/tier="local"/.test(labels ?? '')) counters.waited += value
    } else if (name === 'nodejs_gc_duration_seconds_sum' || name === 'nodejs_gc_duration_seconds_count') {
      const kind = /kind="([^"]*)"/.exec(labels ?? '')?.[1] ?? '?'
      const gc = (counters.gc[kind] ??= { seconds: 0, count: 0 })
      if (name.endsWith('_sum')) gc.seconds += value
      else gc.count += value
    } else {
      const extra = EXTRA_COUNTERS.find((n) => n === name)
      if (extra !== undefined) counters.extra[extra] = (counters.extra[extra] ?? 0) + value
    }
  }
  return counters
}

/** `total` plus what the counters moved by from `before` to `after`; null once any read failed. */
function addDifference(total: StoreCounters | null, before: StoreCounters | null, after: StoreCounters | null): StoreCounters | null {
  if (total === null || before === null || after === null) return null
  const extra: StoreCounters['extra'] = {}
  for (const name of EXTRA_COUNTERS) {
    const [was, is] = [before.extra[name], after.extra[name]]
    if (was !== undefined && is !== undefined) extra[name] = (total.extra[name] ?? 0) + is - was
  }
  const gc: StoreCounters['gc'] = {}
  for (const [kind, now] of Object.entries(after.gc)) {
    const was = before.gc[kind] ?? { seconds: 0, count: 0 }
    const sum = total.gc[kind] ?? { seconds: 0, count: 0 }
    gc[kind] = { seconds: sum.seconds + now.seconds - was.seconds, count: sum.count + now.count - was.count }
  }
  return {
    redis: total.redis + after.redis - before.redis,
    postgres: total.postgres + after.postgres - before.postgres,
    waited: total.waited + after.waited - before.waited,
    extra,
    gc,
  }
}

/** "minor 120 × 1.1 ms, major 0", for the garbage collections a round saw. */
function describeGc(gc: StoreCounters['gc']): string {
  const kinds = Object.entries(gc).filter(([, { count }]) => count > 0)
  if (kinds.length === 0) return 'none'
  return kinds.map(([kind, { seconds, count }]) => `${kind} ${fmt(count)} × ${((seconds * 1000) / count).toFixed(2)} ms`).join(', ')
}

/** One request through a gateway side, so that its round starts with its cache warm. */
async function warmAgain(side: Side): Promise<void> {
  const response = await fetch(side.url + PROXIED_PATH, { headers: side.headers })
  const text = await response.text()
  if (response.status !== 200) throw new Error(`${side.name}: warming request answered ${response.status}: ${text.slice(0, 500)}`)
}

async function askUpstream(upstream: ChildProcess): Promise<UpstreamStats> {
  return new Promise((done, fail) => {
    const timer = setTimeout(() => fail(new Error('the upstream did not report its counts within 5 s')), 5000)
    upstream.once('message', (message: UpstreamStats) => {
      clearTimeout(timer)
      done(message)
    })
    upstream.send({ type: 'stats' })
  })
}

function command(): string {
  const env = [`BENCH_DURATION=${DURATION}`, `BENCH_CONNECTIONS=${CONNECTIONS}`, `BENCH_ROUNDS=${ROUNDS}`, `BENCH_WARMUP=${WARMUP}`, `BENCH_WARMUP_ROUNDS=${WARMUP_ROUNDS}`]
  for (const name of ['BENCH_DATABASE_URL', 'BENCH_REDIS_URL', 'BENCH_BASELINE_TREE', 'BENCH_GATEWAY_RUNTIME', 'BENCH_BASELINE_RUNTIME', 'BENCH_BARE_HEADERS', 'BENCH_NODE']) {
    const value = envForCommand(name)
    if (value !== null) env.push(value)
  }
  return `${env.join(' ')} npx tsx bench/proxy.ts`
}

function printReport(rounds: Round[], store: string[], upstream: UpstreamStats, pgVersion: string): void {
  const cpus = os.cpus()
  const of = (side: Side['name']) => rounds.filter((r) => r.side === side)
  const summary = (side: Side['name']): Round => {
    const mine = of(side)
    return {
      side,
      round: 'median',
      completed: mine.reduce((sum, r) => sum + r.completed, 0),
      perSecond: median(mine.map((r) => r.perSecond)),
      p50: median(mine.map((r) => r.p50)),
      p99: median(mine.map((r) => r.p99)),
      cpuMicros: median(mine.map((r) => r.cpuMicros)),
    }
  }
  const bare = summary('bare')
  const gateway = summary('gateway')
  const baseline = BASELINE_TREE === null ? null : summary('baseline')

  console.log(`date      ${new Date().toISOString()}`)
  console.log(`machine   ${cpus[0]?.model.trim() ?? 'unknown cpu'}, ${cpus.length} cores, ${os.platform()} ${os.release()}`)
  console.log(`node      servers (upstream, bare, gateway) on ${servedBy}; load generator on ${process.version}`)
  console.log(`packages  fastify ${packageVersion('fastify')}, @fastify/http-proxy ${packageVersion('@fastify/http-proxy')}, autocannon ${packageVersion('autocannon')}`)
  console.log(`command   ${command()}`)
  console.log(
    `load      GET ${PROXIED_PATH}, ${CONNECTIONS} connections, keep-alive, warm-up ${WARMUP_ROUNDS} × ${WARMUP} s per side (not measured), ` +
      `then ${ROUNDS} × ${DURATION} s per side`,
  )
  console.log(`          alternating bare/gateway; autocannon in the parent, each server in its own process`)
  console.log(`upstream  node:http, 200 ${UPSTREAM_BODY}; accepted ${upstream.connections} connections in all`)
  const sent = bareHeadersMode() === 'same' ? 'sent the same request as the gateway (it passes the headers on)' : 'sent no headers'
  console.log(`bare      fastify + @fastify/http-proxy, no auth, logger off, node ${BARE_NODE_ARGS.join(' ')} (under tsx); ${sent}`)
  const how = (runtime: GatewayRuntime) => (runtime === 'dist' ? 'compiled as the image is' : 'from src/ under tsx')
  console.log(`gateway   ${how(GATEWAY_RUNTIME)}, node ${commandLines.gateway ?? '?'}, at ${gitDescription()}, LOG_LEVEL=warn, Postgres ${pgVersion}, Redis;`)
  console.log(`          parent key acting as ext:${SUB_EXTERNAL_ID} (Authorization + X-Service-Acting-Tenant)`)
  if (BASELINE_TREE !== null) {
    console.log(`baseline  the same, from ${BASELINE_TREE} at ${gitDescription(BASELINE_TREE)}, ${how(BASELINE_RUNTIME)}, node ${commandLines.baseline ?? '?'}`)
  }
  console.log('')
  const header = ['side', 'round', 'requests', 'req/s', 'p50 ms', 'p99 ms', 'CPU µs/req']
  const rows = [...rounds, bare, gateway, ...(baseline === null ? [] : [baseline])].map((r) => [
    r.side,
    r.round,
    fmt(r.completed),
    fmt(r.perSecond),
    r.p50.toFixed(3),
    r.p99.toFixed(3),
    r.cpuMicros.toFixed(1),
  ])
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)))
  const line = (cells: string[]) => cells.map((c, i) => (i < 2 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ')
  console.log(line(header))
  console.log(line(widths.map((w) => '-'.repeat(w))))
  rows.forEach((row, i) => {
    if (i === rounds.length) console.log(line(widths.map((w) => '-'.repeat(w))))
    console.log(line(row))
  })
  console.log('(median rows: req/s, p50, p99 and CPU are medians over the rounds, requests their sum; latencies are per request, 2xx only;')
  console.log(" CPU µs/req is the server process's user + system time over the round, divided by its requests)")
  console.log('')
  const throughput = gateway.perSecond / bare.perSecond
  console.log(
    `gateway / bare   req/s ${throughput.toFixed(3)} (target ≥ 0.90: ${throughput >= 0.9 ? 'met' : 'NOT MET'}), ` +
      `p50 ${(gateway.p50 / bare.p50).toFixed(3)}, p99 ${(gateway.p99 / bare.p99).toFixed(3)}, ` +
      `CPU/request ${(gateway.cpuMicros / bare.cpuMicros).toFixed(3)}   (medians)`,
  )
  // Each gateway round against the bare round just before it: how far one round's noise reaches.
  const paired = of('gateway').map((g, i) => g.perSecond / of('bare')[i]!.perSecond)
  console.log(`                 req/s round by round: ${paired.map((r) => r.toFixed(3)).join(', ')}`)
  if (baseline !== null) {
    console.log(
      `baseline / bare  req/s ${(baseline.perSecond / bare.perSecond).toFixed(3)}, CPU/request ${(baseline.cpuMicros / bare.cpuMicros).toFixed(3)}; ` +
        `gateway / baseline: req/s ${(gateway.perSecond / baseline.perSecond).toFixed(3)}, CPU/request ${(gateway.cpuMicros / baseline.cpuMicros).toFixed(3)}   (medians)`,
    )
  }
  for (const s of store) console.log(s)
  console.log(`upstream saw     ${fmt(upstream.fromGateway)} requests from the gateway, ${fmt(upstream.fromOthers)} from the bare proxy (warm-up and probes included)`)
}

async function main(): Promise<void> {
  const dbName = `tgw_bench_${randomBytes(6).toString('hex')}`
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} })
  const dbUrl = new URL(ADMIN_URL)
  dbUrl.pathname = `/${dbName}`
  let created = false
  let upstream: ChildProcess | null = null
  let bareProxy: ChildProcess | null = null
  let gateway: ChildProcess | null = null
  let gatewayOutput = () => ''
  let baselineGateway: ChildProcess | null = null
  /** Compiled gateways, removed at the end. */
  const distDirs: string[] = []
  try {
    const [versionRow] = await admin<{ server_version: string }[]>`show server_version`
    await admin.unsafe(`create database ${dbName}`)
    created = true
    console.error(`database ${dbName} created (dropped at the end)`)

    const node = serverNode()
    servedBy = `${node.version} (${node.reason})`
    console.error(`the servers run on node ${servedBy}`)
    const up = await forkRole('upstream', [], node)
    upstream = up.child
    const upstreamUrl = `http://127.0.0.1:${up.port}`
    const bare = await forkRole('bare', [upstreamUrl], node)
    bareProxy = bare.child
    checkInterrupted()

    const [port, metricsPort] = (await freePorts(2)) as [number, number]
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      HOST: '127.0.0.1',
      PORT: String(port),
      METRICS_PORT: String(metricsPort),
      DATABASE_URL: dbUrl.toString(),
      REDIS_URL,
      UPSTREAM_URL: upstreamUrl,
      LOG_LEVEL: 'warn',
      GATEWAY_CONFIG: resolve(ROOT, 'config/gateway.yaml'),
    }
    console.error(`starting the gateway on :${port} (metrics :${metricsPort})…`)
    let gatewayDist: string | null = null
    if (GATEWAY_RUNTIME === 'dist') {
      console.error('compiling the gateway…')
      gatewayDist = buildDist(ROOT, 'proxy')
      distDirs.push(gatewayDist)
    }
    const gatewayNodeArgs = gatewayArgs(GATEWAY_RUNTIME, ROOT, gatewayDist, SERVER_NODE_ARGS)
    commandLines.gateway = gatewayNodeArgs.join(' ')
    gateway = spawn(node.path, gatewayNodeArgs, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] })
    children.push(gateway)
    gatewayOutput = captureOutput(gateway)
    if (GATEWAY_OUTPUT !== undefined) {
      const file = createWriteStream(GATEWAY_OUTPUT)
      file.on('error', (err) => console.error(`BENCH_GATEWAY_OUTPUT: ${err.message}`))
      // Both streams into one file, which ends when the gateway is gone, not when the first does.
      gateway.stdout?.pipe(file, { end: false })
      gateway.stderr?.pipe(file, { end: false })
      gateway.once('close', () => file.end())
    }
    const gatewayBase = `http://127.0.0.1:${port}`
    await waitForGateway(gatewayBase, gateway, gatewayOutput)

    // Seed: a parent account by the CLI, one sub-account by the API.
    const seeded = JSON.parse(await runCli(['accounts', 'create', '--name', 'bench'], env)) as { account: { id: string }; api_key: string }
    const parentId = seeded.account.id
    const apiKey = seeded.api_key
    const createResponse = await fetch(`${gatewayBase}/v1/sub-accounts`, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'bench-sub', external_id: SUB_EXTERNAL_ID }),
    })
    const createText = await createResponse.text()
    if (createResponse.status !== 201) throw new Error(`POST /v1/sub-accounts answered ${createResponse.status}: ${createText.slice(0, 500)}`)
    const subId = (JSON.parse(createText) as { id: string }).id

    const gatewayHeaders = { authorization: `Bearer ${apiKey}`, 'x-service-acting-tenant': `ext:${SUB_EXTERNAL_ID}` }
    const sides: Partial<Record<Side['name'], Side>> & Record<'bare' | 'gateway', Side> = {
      bare: { name: 'bare', url: `http://127.0.0.1:${bare.port}`, headers: bareHeaders(gatewayHeaders), pid: bare.child.pid },
      gateway: { name: 'gateway', url: gatewayBase, pid: gateway.pid, headers: gatewayHeaders },
    }

    if (BASELINE_TREE !== null) {
      const [basePort, baseMetricsPort] = (await freePorts(2)) as [number, number]
      const baseEnv = { ...env, PORT: String(basePort), METRICS_PORT: String(baseMetricsPort), GATEWAY_CONFIG: resolve(BASELINE_TREE, 'config/gateway.yaml') }
      console.error(`starting the baseline gateway from ${BASELINE_TREE} on :${basePort}…`)
      const baselineDist = BASELINE_RUNTIME === 'dist' ? buildDist(BASELINE_TREE, 'proxy-baseline') : null
      if (baselineDist !== null) distDirs.push(baselineDist)
      const baselineNodeArgs = gatewayArgs(BASELINE_RUNTIME, BASELINE_TREE, baselineDist, SERVER_NODE_ARGS)
      commandLines.baseline = baselineNodeArgs.join(' ')
      baselineGateway = spawn(node.path, baselineNodeArgs, { cwd: BASELINE_TREE, env: baseEnv, stdio: ['ignore', 'pipe', 'pipe'] })
      children.push(baselineGateway)
      const baseUrl = `http://127.0.0.1:${basePort}`
      await waitForGateway(baseUrl, baselineGateway, captureOutput(baselineGateway))
      sides.baseline = { name: 'baseline', url: baseUrl, pid: baselineGateway.pid, headers: sides.gateway!.headers }
    }

    // Pre-flight: each side reaches the upstream, and the gateway really acts as the sub-account.
    for (const side of Object.values(sides)) {
      const response = await fetch(side.url + ECHO_PATH, { headers: side.headers })
      const text = await response.text()
      if (response.status !== 200) throw new Error(`${side.name}: GET ${ECHO_PATH} answered ${response.status}, not the upstream's 200: ${text.slice(0, 500)}`)
      if (side.name === 'bare') continue
      const seen = JSON.parse(text) as Record<string, string | undefined>
      const wrong = [
        ['x-service-resolved-tenant', subId],
        ['x-service-caller-tenant', parentId],
      ].filter(([name, expected]) => seen[name!] !== expected)
      if (wrong.length > 0) {
        throw new Error(`the upstream received ${wrong.map(([name, expected]) => `${name}: ${seen[name!]} (expected ${expected})`).join(', ')}`)
      }
      if (seen.authorization !== undefined) console.error('note: the gateway forwarded Authorization to the upstream (DESIGN §5 says it should not)')
    }

    console.error(`warming up, ${WARMUP_ROUNDS} × ${WARMUP} s per side…`)
    const beforeWarmup = await readCounters(metricsPort)
    for (let pass = 1; pass <= WARMUP_ROUNDS; pass++) {
      for (const side of Object.values(sides)) {
        await sleep(500)
        await load(side, WARMUP, `warm-up ${pass}`)
      }
    }
    const afterWarmup = await readCounters(metricsPort)

    console.error(`measuring, ${ROUNDS} × ${DURATION} s per side…`)
    const rounds: Round[] = []
    // The gateway's lookups during its own rounds only. It idles through the other sides' rounds,
    // longer than its in-process TTL, so one request before each round warms it again first (the
    // issue's measure: once warm, no lookup a request waits for).
    let measured: StoreCounters | null = noCounters()
    for (let r = 1; r <= ROUNDS; r++) {
      for (const side of Object.values(sides)) {
        await sleep(500)
        if (side.name !== 'bare') await warmAgain(side)
        const before = side.name === 'gateway' ? await readCounters(metricsPort) : null
        rounds.push(await load(side, DURATION, String(r)))
        if (side.name === 'gateway') {
          const after = await readCounters(metricsPort)
          const round = addDifference(noCounters(), before, after)
          if (round !== null) console.error(`    its garbage collections: ${describeGc(round.gc)}`)
          measured = addDifference(measured, before, after)
        }
      }
    }
    const measuredGateway = rounds.filter((r) => r.side === 'gateway').reduce((sum, r) => sum + r.completed, 0)

    const store: string[] = []
    if (afterWarmup === null || measured === null) {
      store.push(`store lookups    metrics unavailable (no tgw_store_lookups_total on http://127.0.0.1:${metricsPort}/metrics)`)
    } else {
      if (beforeWarmup !== null) {
        store.push(
          `store lookups    warm-up: ${fmt(afterWarmup.postgres - beforeWarmup.postgres)} Postgres and ` +
            `${fmt(afterWarmup.redis - beforeWarmup.redis)} Redis (since the gateway started, seeding included: ${fmt(afterWarmup.postgres)} and ${fmt(afterWarmup.redis)})`,
        )
      }
      store.push(
        `store lookups    the gateway's measured rounds: ${fmt(measured.postgres)} Postgres and ${fmt(measured.redis)} Redis lookups ` +
          `for ${fmt(measuredGateway)} requests, of which a request waited for ${fmt(measured.waited)} (in-process misses); ` +
          'the others refreshed entries in use in the background',
      )
      const deltas = EXTRA_COUNTERS.map((name) => {
        const value = measured!.extra[name]
        return value === undefined ? `${name} not exported` : `${name} +${fmt(value)}`
      })
      store.push(`                 ${deltas.join(', ')}`)
    }
    const upstreamStats = await askUpstream(up.child)
    const gatewayLog = gatewayOutput().trim()
    if (gatewayLog !== '') console.error(`the gateway wrote (last 16 KiB):\n${gatewayLog}`)
    printReport(rounds, store, upstreamStats, versionRow?.server_version ?? 'unknown')
  } catch (err) {
    const log = gatewayOutput().trim()
    if (log !== '') console.error(`the gateway wrote (last 16 KiB):\n${log}`)
    throw err
  } finally {
    // Every step is attempted even if one fails; the gateway first, so the database is idle.
    await stopChild(baselineGateway, 15_000).catch((err) => console.error('stopping the baseline gateway:', err))
    await stopChild(gateway, 15_000).catch((err) => console.error('stopping the gateway:', err))
    await stopChild(bareProxy, 5_000).catch((err) => console.error('stopping the bare proxy:', err))
    await stopChild(upstream, 5_000).catch((err) => console.error('stopping the upstream:', err))
    if (created) {
      await admin
        .unsafe(`drop database if exists ${dbName} with (force)`)
        .catch((err) => console.error(`dropping ${dbName} failed; drop it by hand:`, err))
    }
    await admin.end({ timeout: 5 })
    for (const dir of distDirs) rmSync(dir, { recursive: true, force: true })
  }
}

const role = process.argv[2]
if (role === 'upstream') {
  await runUpstream()
} else if (role === 'bare') {
  await runBare(process.argv[3]!)
} else {
  onSignals()
  await main().then(
    () => {
      process.exitCode = 0
    },
    (err: unknown) => {
      console.error('bench failed:', err instanceof Error && err.message === 'interrupted' ? 'interrupted' : err)
      process.exitCode = 1
    },
  )
}
