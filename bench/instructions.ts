// Instructions per proxied request, counted by valgrind's callgrind, of the gateway beside a bare
// fastify proxy or beside a baseline checkout, run by hand:
//   npm run bench:instructions   (env: BENCH_WARMUP_REQUESTS=20000, BENCH_REQUESTS=5000,
//                                  BENCH_CONNECTIONS=50, BENCH_DATABASE_URL=postgres://…/postgres,
//                                  BENCH_REDIS_URL=redis://127.0.0.1:6379,
//                                  BENCH_BASELINE_TREE= another checkout, as in bench:proxy,
//                                  BENCH_SIDES=bare,gateway[,baseline],
//                                  BENCH_NODE=image (see bench/lib.ts serverNode),
//                                  BENCH_PROFILE_DIR= keep the callgrind dumps there)
// bench:proxy's req/s and CPU time move by 5-10% between runs of the same code on a shared
// machine. The bare proxy's instruction count moved 0.1% between two runs an hour apart; two
// gateways of one commit measured side by side differed by 1.4%. But a gateway's count grows with
// the time valgrind takes to serve the counted requests (its per-second work, below), which depends
// on the host: one A/B gave 0.931 and 1.040 an hour apart. So repeat an A/B, and trust it only when
// both sides took about as long (the seconds are printed). It is a proxy for time, not time: a cache
// miss and a system call count as few instructions. The verdict on the target stays with bench:proxy.
// Each server runs under valgrind, about a hundred times slower. callgrind's counters are zeroed
// after the warm-up requests (V8 has compiled the hot code by then) and dumped after the counted
// ones; the count includes the garbage collector's threads. Work a server does per second rather
// than per request (the gateway's usage flush, its one-second admission window, its cache TTLs) is
// spread over a hundred times fewer requests than at full speed, so it weighs a hundred times more:
// compare a gateway with a baseline measured beside it (BENCH_BASELINE_TREE), not with the bare
// proxy. Load comes from this process (keep-alive node:http clients) and the upstream is node:http;
// neither runs under valgrind.
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import http from 'node:http'
import { type AddressInfo } from 'node:net'
import os from 'node:os'
import { resolve } from 'node:path'
import postgres from 'postgres'
import {
  ADMIN_URL,
  alive,
  bareHeaders,
  buildDist,
  captureOutput,
  children,
  fmt,
  freePorts,
  gatewayArgs,
  gitDescription,
  imageNodeFlags,
  positiveInt,
  PROXIED_PATH,
  REDIS_URL,
  ROOT,
  runCli,
  serverNode,
  sleep,
  stopChild,
  SUB_EXTERNAL_ID,
  UPSTREAM_BODY,
} from './lib.js'

const WARMUP_REQUESTS = positiveInt('BENCH_WARMUP_REQUESTS', 20_000)
const REQUESTS = positiveInt('BENCH_REQUESTS', 5_000)
const CONNECTIONS = positiveInt('BENCH_CONNECTIONS', 50)
const BASELINE_TREE = process.env.BENCH_BASELINE_TREE || null
const SERVER_HOST = '127.0.0.1'
const PROFILE_DIR = process.env.BENCH_PROFILE_DIR || null

type SideName = 'bare' | 'gateway' | 'baseline'
const SIDES = (process.env.BENCH_SIDES || (BASELINE_TREE === null ? 'bare,gateway' : 'bare,gateway,baseline'))
  .split(',')
  .map((side) => side.trim()) as SideName[]
for (const side of SIDES) {
  if (!['bare', 'gateway', 'baseline'].includes(side)) throw new Error(`BENCH_SIDES: bare, gateway or baseline, got "${side}"`)
}
if (SIDES.includes('baseline') && BASELINE_TREE === null) throw new Error('BENCH_SIDES names baseline: set BENCH_BASELINE_TREE')

/** The bare proxy of bench:proxy, as plain JavaScript so that it starts without tsx. */
const BARE_SOURCE = `
import Fastify from 'fastify'
import httpProxy from '@fastify/http-proxy'
const app = Fastify({ logger: false })
await app.register(httpProxy, { upstream: process.env.UPSTREAM_URL })
await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT) })
`

function valgrind(outDir: string): string[] {
  return [
    '--tool=callgrind',
    // V8 writes and rewrites machine code at run time.
    '--smc-check=all-non-file',
    `--callgrind-out-file=${outDir}/callgrind.out.%p`,
    `--log-file=${outDir}/valgrind.%p.log`,
  ]
}

function startUpstream(): Promise<{ server: http.Server; url: string }> {
  const body = Buffer.from(UPSTREAM_BODY)
  const server = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length })
    res.end(body)
  })
  server.keepAliveTimeout = 600_000
  return new Promise((done) => server.listen(0, '127.0.0.1', () => done({ server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` })))
}

// Ctrl-C ends the load at the next request, and the cleanup in main() runs (database, servers).
let interrupted = false
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    interrupted = true
    console.error(`\n${signal}: stopping and cleaning up…`)
  })
}

/** More 503s than this in one drive() mean the store is down, not slow: the bench stops. */
const MAX_RESENT = 50

/**
 * `count` GETs over `connections` keep-alive connections. A 503 store_unavailable is sent again
 * after a pause: under valgrind a store lookup (a cache entry's TTL ran out) can miss its 500 ms
 * deadline. Any other answer but 200 + UPSTREAM_BODY throws. Returns how many were sent again (they ran in
 * the counted span too, a cheaper path: the report says how many).
 */
async function drive(base: string, headers: Record<string, string>, count: number, connections = CONNECTIONS): Promise<number> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: connections })
  let left = count
  let resent = 0
  const one = () =>
    new Promise<boolean>((done, fail) => {
      const req = http.get(base + PROXIED_PATH, { agent, headers }, (res) => {
        let text = ''
        res.setEncoding('utf8')
        res.on('data', (chunk: string) => (text += chunk))
        res.on('end', () => {
          if (res.statusCode === 200 && text === UPSTREAM_BODY) done(true)
          else if (res.statusCode === 503 && text.includes('"store_unavailable"')) done(false)
          else fail(new Error(`${res.statusCode}: ${text.slice(0, 300)}`))
        })
      })
      req.on('error', fail)
    })
  const worker = async () => {
    while (left > 0) {
      if (interrupted) throw new Error('interrupted')
      left--
      while (!(await one())) {
        if (++resent > MAX_RESENT) throw new Error(`more than ${MAX_RESENT} answers 503 store_unavailable: is the store up?`)
        if (interrupted) throw new Error('interrupted')
        await sleep(100)
      }
    }
  }
  try {
    await Promise.all(Array.from({ length: connections }, worker))
  } finally {
    agent.destroy()
  }
  return resent
}

async function waitFor(base: string, path: string, expected: number, child: ChildProcess, output: () => string): Promise<void> {
  const deadline = Date.now() + 600_000
  for (;;) {
    if (!alive(child)) throw new Error(`the server exited (status ${child.exitCode ?? child.signalCode}):\n${output()}`)
    try {
      const response = await fetch(base + path, { signal: AbortSignal.timeout(20_000) })
      await response.text()
      if (response.status === expected) return
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`no answer within 10 min:\n${output()}`)
    await sleep(1000)
  }
}

/**
 * Sends a running server's valgrind a callgrind_control command. valgrind reads it only while the
 * server runs code, and an idle server sleeps in the kernel: so single requests trickle in until
 * the command is answered. Returns how many did (one or two, against thousands counted).
 */
async function callgrind(command: '--zero' | '--dump', pid: number, base: string, headers: Record<string, string>): Promise<number> {
  for (let attempt = 1; ; attempt++) {
    let answer: { out: string } | { err: Error } | null = null
    // valgrind names its vgdb pipes after $HOST, which the servers are given.
    execFile('callgrind_control', [command, String(pid)], { timeout: 120_000, env: { ...process.env, HOST: SERVER_HOST } }, (err, stdout) => {
      answer = err ? { err } : { out: stdout }
    })
    let trickled = 0
    while (answer === null) {
      trickled += 1 + (await drive(base, headers, 1, 1))
      await sleep(20)
    }
    const settled = answer as { out: string } | { err: Error }
    if ('err' in settled) throw settled.err
    // callgrind_control says OK once vgdb has passed the command on, not that it took effect; a
    // zero that did not would count the warm-up too, several times the usual figure.
    if (/OK\./.test(settled.out)) return trickled
    // callgrind_control finds the process through vgdb's files, and now and then misses it.
    if (!/not detected/.test(settled.out) || attempt === 5) throw new Error(`callgrind_control ${command} ${pid}: ${settled.out}`)
  }
}

/** The instructions in a server's one dump (its "summary:" line), and the dump's path. */
async function dumped(outDir: string, pid: number): Promise<{ instructions: number; file: string }> {
  const prefix = `callgrind.out.${pid}.`
  for (let i = 0; i < 600; i++) {
    const name = readdirSync(outDir).find((entry) => entry.startsWith(prefix))
    if (name !== undefined) {
      const file = resolve(outDir, name)
      // In the dump's header; the trailing newline tells a whole number from one still being written.
      const summary = /^summary: (\d+)\n/m.exec(readFileSync(file, 'utf8'))
      if (summary !== null) return { instructions: Number(summary[1]), file }
    }
    await sleep(100)
  }
  throw new Error(`no callgrind dump of ${pid} in ${outDir}`)
}

interface Measured {
  side: SideName
  perRequest: number
}

async function measure(side: SideName, child: ChildProcess, base: string, headers: Record<string, string>, outDir: string): Promise<Measured> {
  const started = Date.now()
  await drive(base, headers, WARMUP_REQUESTS)
  await callgrind('--zero', child.pid!, base, headers)
  const resent = await drive(base, headers, REQUESTS)
  // The single requests that waited for the dump ran inside the counted span, and so did the 503s.
  const requests = REQUESTS + resent + (await callgrind('--dump', child.pid!, base, headers))
  const dump = await dumped(outDir, child.pid!)
  if (PROFILE_DIR !== null) {
    mkdirSync(PROFILE_DIR, { recursive: true })
    copyFileSync(dump.file, resolve(PROFILE_DIR, `callgrind.${side}.out`))
  }
  const perRequest = dump.instructions / requests
  const of503 = resent === 0 ? '' : `, ${fmt(resent)} of them answered 503 store_unavailable and sent again`
  console.error(`  ${side}: ${fmt(perRequest)} instructions per request (${fmt(requests)} requests${of503}, ${((Date.now() - started) / 1000).toFixed(0)} s)`)
  return { side, perRequest }
}

async function main(): Promise<void> {
  const outDir = mkdtempSync(resolve(os.tmpdir(), 'tgw-callgrind-'))
  const dbName = `tgw_bench_${randomBytes(6).toString('hex')}`
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} })
  const dbUrl = new URL(ADMIN_URL)
  dbUrl.pathname = `/${dbName}`
  let created = false
  const started: ChildProcess[] = []
  const distDirs: string[] = []
  const upstream = await startUpstream()
  try {
    await admin.unsafe(`create database ${dbName}`)
    created = true
    const trees: Record<SideName, string> = { bare: ROOT, gateway: ROOT, baseline: BASELINE_TREE ?? ROOT }
    const ports = await freePorts(SIDES.length * 2)
    const env = (side: SideName, i: number): NodeJS.ProcessEnv => ({
      ...process.env,
      HOST: SERVER_HOST,
      PORT: String(ports[2 * i]),
      METRICS_PORT: String(ports[2 * i + 1]),
      DATABASE_URL: dbUrl.toString(),
      REDIS_URL,
      UPSTREAM_URL: upstream.url,
      LOG_LEVEL: 'warn',
      GATEWAY_CONFIG: resolve(trees[side], 'config/gateway.yaml'),
    })

    const node = serverNode()
    console.error(`the servers run on node ${node.version} (${node.reason})`)
    // Every side starts at once: valgrind runs one thread at a time, so two cores serve two sides.
    const servers = SIDES.map((side, i) => {
      let args: string[]
      if (side === 'bare') {
        args = [...imageNodeFlags(ROOT), '--input-type=module', '-e', BARE_SOURCE]
      } else {
        const dist = buildDist(trees[side], `instructions-${side}`)
        distDirs.push(dist)
        args = gatewayArgs('dist', trees[side], dist)
      }
      const child = spawn('valgrind', [...valgrind(outDir), node.path, ...args], { cwd: trees[side], env: env(side, i), stdio: ['ignore', 'pipe', 'pipe'] })
      children.push(child)
      started.push(child)
      return { side, child, base: `http://127.0.0.1:${ports[2 * i]}`, output: captureOutput(child), env: env(side, i) }
    })
    console.error(`starting ${SIDES.join(', ')} under valgrind (a minute or more)…`)
    for (const server of servers) {
      if (server.side === 'bare') await waitFor(server.base, PROXIED_PATH, 200, server.child, server.output)
      else await waitFor(server.base, '/v1/sub-accounts', 401, server.child, server.output)
    }

    // Seed through the first gateway: a parent account by the CLI, one sub-account by the API.
    const gatewayServer = servers.find((server) => server.side !== 'bare')
    let headers: Record<string, string> = {}
    if (gatewayServer !== undefined) {
      const seeded = JSON.parse(await runCli(['accounts', 'create', '--name', 'bench'], gatewayServer.env)) as { api_key: string }
      const response = await fetch(`${gatewayServer.base}/v1/sub-accounts`, {
        method: 'POST',
        headers: { authorization: `Bearer ${seeded.api_key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'bench-sub', external_id: SUB_EXTERNAL_ID }),
      })
      if (response.status !== 201) throw new Error(`POST /v1/sub-accounts answered ${response.status}: ${(await response.text()).slice(0, 300)}`)
      headers = { authorization: `Bearer ${seeded.api_key}`, 'x-service-acting-tenant': `ext:${SUB_EXTERNAL_ID}` }
    }

    console.error(`${fmt(WARMUP_REQUESTS)} requests to warm up, then ${fmt(REQUESTS)} counted, per side…`)
    // Two at a time, one per core: three valgrinds on two cores slow the gateway's store lookups
    // past their deadlines. The gateway and the baseline go together, so that they are measured
    // under the same conditions (how many requests arrive per turn of the event loop).
    const batches = SIDES.length === 3 ? [['bare'], ['gateway', 'baseline']] : [SIDES]
    const results: Measured[] = []
    for (const batch of batches) {
      const running = servers.filter((server) => batch.includes(server.side))
      results.push(
        ...(await Promise.all(
          running.map((server) => measure(server.side, server.child, server.base, server.side === 'bare' ? bareHeaders(headers) : headers, outDir)),
        )),
      )
    }
    const of = (side: SideName) => results.find((r) => r.side === side)

    console.log(`date      ${new Date().toISOString()}`)
    console.log(`node      servers on ${node.version} (${node.reason}), ${execFileSync('valgrind', ['--version'], { encoding: 'utf8' }).trim()} (callgrind)`)
    console.log(`load      GET ${PROXIED_PATH}, ${CONNECTIONS} keep-alive connections, ${fmt(WARMUP_REQUESTS)} requests uncounted, then ${fmt(REQUESTS)} counted`)
    console.log(`bare      fastify + @fastify/http-proxy, no auth, logger off, node ${imageNodeFlags(ROOT).join(' ')}`)
    console.log(`gateway   compiled as the image is, at ${gitDescription()}, LOG_LEVEL=warn; parent key acting as ext:${SUB_EXTERNAL_ID}`)
    if (BASELINE_TREE !== null) console.log(`baseline  the same, from ${BASELINE_TREE} at ${gitDescription(BASELINE_TREE)}`)
    console.log('')
    for (const r of results) console.log(`${r.side.padEnd(9)} ${fmt(r.perRequest).padStart(10)} instructions per request`)
    const bare = of('bare')
    const gateway = of('gateway')
    const baseline = of('baseline')
    if (bare && gateway) console.log(`gateway / bare      ${(gateway.perRequest / bare.perRequest).toFixed(3)}`)
    if (bare && baseline) console.log(`baseline / bare     ${(baseline.perRequest / bare.perRequest).toFixed(3)}`)
    if (gateway && baseline) console.log(`gateway / baseline  ${(gateway.perRequest / baseline.perRequest).toFixed(3)}`)
  } finally {
    await Promise.all(started.map((child) => stopChild(child, 30_000).catch(() => {})))
    upstream.server.close()
    upstream.server.closeAllConnections()
    if (created) await admin.unsafe(`drop database if exists ${dbName} with (force)`).catch((err) => console.error(`drop ${dbName} by hand:`, err))
    await admin.end({ timeout: 5 })
    for (const dir of distDirs) rmSync(dir, { recursive: true, force: true })
    rmSync(outDir, { recursive: true, force: true })
  }
}

await main().catch((err: unknown) => {
  console.error('bench failed:', err)
  process.exitCode = 1
})
