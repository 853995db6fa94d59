// What bench:instructions, bench:upstream-instructions and bench:credit-instructions share: servers run under valgrind's
// callgrind, keep-alive load from this process (not under it), and a count of the instructions a
// server ran over a span of requests (callgrind_control --zero, the requests, --dump). A server
// may be counted many times: each dump is read once and removed. bench/README.md.
import { execFile, execFileSync } from 'node:child_process'
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import { resolve } from 'node:path'
import {
  createDatabase,
  fmt,
  type Gateway,
  isInterrupted,
  median,
  reportHead,
  PROXIED_PATH,
  request,
  type Server,
  seedActing,
  sleep,
  startGateway,
  stopChild,
  UPSTREAM_BODY,
} from './lib.js'

// valgrind names its vgdb pipes after $HOST, which callgrind_control must share with the servers.
process.env.HOST = '127.0.0.1'

/**
 * What is counted (BENCH_COLLECT): `all`, every instruction of the process, its threads included;
 * `io`, only those run inside libuv's I/O poll (uv__io_poll): the sockets' callbacks, where a
 * proxied request is served, with the microtasks and the collections they bring. `io` leaves out
 * the timers (the usage flush, the caches' TTLs, the admission window…) and V8's own threads,
 * whose work comes by the second: under valgrind, at a hundredth of the speed, it weighs a hundred
 * times more a request, and moves with the machine's load.
 */
export type Collect = 'all' | 'io'

export function collectKnob(): Collect {
  const collect = process.env.BENCH_COLLECT || 'all'
  if (collect !== 'all' && collect !== 'io') throw new Error(`BENCH_COLLECT must be all or io, got "${collect}"`)
  return collect
}

/** Where the counts go, and the command prefix that puts a server under callgrind. */
export interface Callgrind {
  outDir: string
  wrap: string[]
  collect: Collect
  remove(): void
}

export function callgrindWrap(collect: Collect = 'all'): Callgrind {
  const outDir = mkdtempSync(resolve(os.tmpdir(), 'tgw-callgrind-'))
  return {
    outDir,
    collect,
    // V8 writes and rewrites machine code at run time.
    wrap: [
      'valgrind',
      '--tool=callgrind',
      '--smc-check=all-non-file',
      ...(collect === 'io' ? ['--collect-atstart=no', '--toggle-collect=uv__io_poll'] : []),
      `--callgrind-out-file=${outDir}/callgrind.out.%p`,
      `--log-file=${outDir}/valgrind.%p.log`,
    ],
    remove: () => rmSync(outDir, { recursive: true, force: true }),
  }
}

/** A report's head: reportHead's lines, then valgrind's version and what was counted. */
export const valgrindHead = (script: string, collect: Collect) => [
  ...reportHead(script),
  `valgrind  ${execFileSync('valgrind', ['--version'], { encoding: 'utf8' }).trim()} (callgrind), the load from this process and the upstreams not under it`,
  collectLine(collect),
]

/** What a bench counting loads in turn on one gateway has to hand (`inTurnBench`). */
export interface InTurnFrame {
  callgrind: Callgrind
  databaseUrl: string
  /** Servers to stop at the end, the last first. */
  started: Server[]
  /** Writes `yaml` as a gateway's configuration file: the environment that names it. */
  config(yaml: string): { GATEWAY_CONFIG: string }
  /** The gateway to count, under callgrind (startPatiently), stopped at the end. */
  startCounted(upstreamUrl: string, env: Record<string, string>): Promise<Gateway>
}

/**
 * The frame of bench:upstream-instructions and bench:credit-instructions: a fresh database (named
 * after `label`), callgrind's folder, a folder for configuration files, and, however `body` ends,
 * every server stopped, the folders removed and the database dropped.
 */
export async function inTurnBench(label: string, body: (frame: InTurnFrame) => Promise<void>): Promise<void> {
  const callgrind = callgrindWrap(collectKnob())
  const started: Server[] = []
  const db = await createDatabase(label)
  const configDir = mkdtempSync(resolve(os.tmpdir(), `tgw-bench-${label}-`))
  let configs = 0
  try {
    await body({
      callgrind,
      databaseUrl: db.url,
      started,
      config: (yaml) => {
        const path = resolve(configDir, `gateway-${++configs}.yaml`)
        writeFileSync(path, yaml)
        return { GATEWAY_CONFIG: path }
      },
      startCounted: async (upstreamUrl, env) => {
        console.error('starting the gateway under valgrind (a minute or more)…')
        const gateway = await startPatiently(() =>
          startGateway({ databaseUrl: db.url, upstreamUrl, wrap: callgrind.wrap, timeoutMs: 600_000, env }),
        )
        started.push(gateway)
        return gateway
      },
    })
  } finally {
    for (const server of started.reverse()) await stopChild(server.child, 30_000)
    rmSync(configDir, { recursive: true, force: true })
    await db.drop()
    callgrind.remove()
  }
}

/** The report's line on what was counted. */
export const collectLine = (collect: Collect) =>
  `counted   ${collect === 'io' ? "BENCH_COLLECT=io: the instructions run inside libuv's I/O poll (uv__io_poll), on the main thread; not the timers' nor V8's threads'" : 'BENCH_COLLECT=all: every instruction of the process, its threads included'}`

/**
 * The parent acting as its sub-account (seedActing), made through a gateway not under valgrind: on
 * a busy machine, one under it misses the store's deadlines on every try of the management call.
 * The headers of the parent's key acting as the sub-account.
 */
export async function seedOutsideValgrind(
  databaseUrl: string,
  upstreamUrl: string,
  o: {
    /** The gateway's environment (GATEWAY_CONFIG, say). */
    env?: Record<string, string>
    /** What is made, by default seedActing's parent and sub-account. */
    seed?: (gateway: Gateway, databaseUrl: string) => Promise<{ headers: Record<string, string> }>
  } = {},
): Promise<Record<string, string>> {
  const gateway = await startGateway({ databaseUrl, upstreamUrl, ...(o.env === undefined ? {} : { env: o.env }) })
  try {
    return (await (o.seed ?? seedActing)(gateway, databaseUrl)).headers
  } finally {
    await stopChild(gateway.child)
  }
}

/**
 * A server started under valgrind, tried again up to three times: on a busy machine, a gateway's
 * plugin may not start in fastify's time, or its first statements may pass Postgres' timeout.
 */
export async function startPatiently<T>(start: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await start()
    } catch (err) {
      if (attempt === 3 || isInterrupted()) throw err
      console.error(`the server under valgrind did not start (${(err as Error).message.split('\n')[0]}); again…`)
    }
  }
}

/** What is sent: the path (PROXIED_PATH by default) and headers of a GET the upstream answers 200. */
export interface Load {
  headers: Record<string, string>
  path?: string
}

/**
 * `count` GETs over `connections` keep-alive connections. Under valgrind a store lookup (an entry's
 * TTL ran out) can miss its deadline, the more so the more requests wait in the server's loop: a
 * 503 store_unavailable is sent again after a pause, and counted (it ran in the counted span too);
 * so is a 408 request_timeout, Node's headers timeout run out on a machine busy enough to starve
 * valgrind. Anything else but the upstream's 200 fails the bench.
 */
export async function drive(url: string, load: Load, count: number, connections: number): Promise<number> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: connections })
  const call = { method: 'GET' as const, path: load.path ?? PROXIED_PATH, headers: load.headers }
  let [left, resent] = [count, 0]
  // A few in a hundred: more and the counts are not of proxied requests.
  const maxResent = Math.max(50, Math.ceil(count / 20))
  const worker = async () => {
    while (left-- > 0) {
      for (;;) {
        if (isInterrupted()) throw new Error('interrupted')
        const a = await request(agent, new URL(url), call, 600_000)
        if (a.status === 200 && a.body === UPSTREAM_BODY) break
        const stalled =
          (a.status === 503 && a.body.includes('store_unavailable')) ||
          (a.status === 408 && a.body.includes('request_timeout'))
        if (!stalled) throw new Error(`${a.status}: ${a.body.slice(0, 300)}`)
        if (++resent > maxResent)
          throw new Error(
            `more than ${maxResent} answers 503 store_unavailable or 408 request_timeout: is the store up?`,
          )
        await sleep(100)
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(connections, count) }, worker)).finally(() => agent.destroy())
  return resent
}

/**
 * A callgrind_control command to a running server. valgrind reads it only while the server runs
 * code, so single requests (of `load`) trickle in until it is answered; returns how many did.
 */
async function control(command: '--zero' | '--dump', server: Server, load: Load): Promise<number> {
  for (let attempt = 1; ; attempt++) {
    let answer: { out: string; err: Error | null } | null = null
    execFile('callgrind_control', [command, String(server.child.pid)], { timeout: 120_000 }, (err, out) => {
      answer = { out, err }
    })
    let trickled = 0
    while (answer === null) {
      trickled += 1 + (await drive(server.url, load, 1, 1))
      await sleep(20)
    }
    const { out, err } = answer as { out: string; err: Error | null }
    if (err !== null) throw err
    // OK once vgdb passed the command on; it finds the process through vgdb's files, and now and then misses it.
    if (/OK\./.test(out)) return trickled
    if (!/not detected/.test(out) || attempt === 5) throw new Error(`callgrind_control ${command}: ${out}`)
  }
}

/** The total of `server`'s next dump in `outDir` once callgrind has written it whole; the file is removed. */
async function readDump(server: Server, outDir: string, seen: Set<string>): Promise<number> {
  for (let i = 0; i < 1200; i++) {
    for (const name of readdirSync(outDir)) {
      if (!name.startsWith(`callgrind.out.${server.child.pid}`) || seen.has(name)) continue
      // The trailing newline tells a whole number from one still being written.
      const summary = /^summary: (\d+)\n/m.exec(readFileSync(resolve(outDir, name), 'utf8'))
      if (summary == null) continue
      seen.add(name)
      // BENCH_KEEP_DUMPS=<folder>: a copy of each dump, for callgrind_annotate (bench/README.md).
      if (process.env.BENCH_KEEP_DUMPS) copyFileSync(resolve(outDir, name), resolve(process.env.BENCH_KEEP_DUMPS, name))
      rmSync(resolve(outDir, name), { force: true })
      return Number(summary[1])
    }
    await sleep(100)
  }
  throw new Error(`no callgrind dump of process ${server.child.pid}`)
}

export interface Counted {
  perRequest: number
  requests: number
  resent: number
  seconds: number
}

const dumpsSeen = new Set<string>()

/**
 * Instructions per request of `server` over `requests` GETs of `load`: its counters zeroed, the
 * requests sent, its counters dumped. The requests that trickled in while callgrind_control waited
 * ran in the counted span, and so did the resent ones: all are counted.
 */
export async function countRequests(
  server: Server,
  load: Load,
  requests: number,
  connections: number,
  outDir: string,
): Promise<Counted> {
  const started = Date.now()
  await control('--zero', server, load)
  const resent = await drive(server.url, load, requests, connections)
  const total = requests + resent + (await control('--dump', server, load))
  const instructions = await readDump(server, outDir, dumpsSeen)
  return { perRequest: instructions / total, requests: total, resent, seconds: (Date.now() - started) / 1000 }
}

export const countedLine = (side: string, c: Counted) =>
  `  ${side}: ${fmt(c.perRequest)} instructions per request (${fmt(c.requests)} requests, ${fmt(c.resent)} resent, ${c.seconds.toFixed(0)} s)`

/**
 * Instructions per request of each of `loads` on one `server`, counted in turn: `warmup` requests
 * a load uncounted (500 at a time, in turn), then `rounds` rounds of `requests` counted a load, the
 * order turned each round, so that what the process does by the second weighs about the same on
 * each and the code the JIT made is the same. Each round's count, by load.
 */
export async function countInTurn<Name extends string>(
  server: Server,
  loads: Record<Name, Load>,
  o: { warmup: number; requests: number; rounds: number; connections: number; outDir: string },
): Promise<Record<Name, Counted[]>> {
  const names = Object.keys(loads) as Name[]
  const chunk = 500
  console.error(`${fmt(o.warmup)} requests a load to warm up, in turn…`)
  for (let sent = 0; sent < o.warmup; sent += chunk)
    for (const name of names) await drive(server.url, loads[name], Math.min(chunk, o.warmup - sent), o.connections)
  const rounds = Object.fromEntries(names.map((name) => [name, [] as Counted[]])) as Record<Name, Counted[]>
  for (let round = 0; round < o.rounds; round++) {
    const shift = round % names.length
    for (const name of [...names.slice(shift), ...names.slice(0, shift)]) {
      const counted = await countRequests(server, loads[name], o.requests, o.connections, o.outDir)
      rounds[name].push(counted)
      console.error(countedLine(`${name} round ${round + 1}`, counted))
    }
  }
  return rounds
}

/** A report's line of the ratios `on`/`off`, round by round, and their median. */
export function ratioLine(what: string, on: readonly Counted[], off: readonly Counted[]): string {
  const ratios = on.map((c, i) => c.perRequest / off[i]!.perRequest)
  return `${what}  median ${median(ratios).toFixed(3)}; rounds ${ratios.map((x) => x.toFixed(3)).join(', ')}`
}

/** A report's line of one load's median instructions per request and the seconds its rounds took. */
export const medianLine = (name: string, counted: readonly Counted[], width = 6) =>
  `${name.padEnd(width)} ${fmt(median(counted.map((c) => c.perRequest))).padStart(10)} instructions per request (median); seconds a round ${counted.map((c) => c.seconds.toFixed(0)).join(', ')}`
