// What the benches share: knobs, interrupts, the Node the servers run on, the processes they
// start (upstream, bare proxy, gateways compiled as the image runs them), databases, /metrics and
// /proc readings, the autocannon load loop and the figures. How each bench uses them: bench/README.md.
import { type ChildProcess, execFile, execFileSync, spawn, spawnSync } from 'node:child_process'
import { randomBytes, randomUUID } from 'node:crypto'
import {
  cpSync,
  existsSync,
  lstatSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  unlinkSync,
} from 'node:fs'
import http from 'node:http'
import { createRequire } from 'node:module'
import net, { type AddressInfo } from 'node:net'
import os from 'node:os'
import { dirname, resolve } from 'node:path'
import { performance } from 'node:perf_hooks'
import { fileURLToPath } from 'node:url'
import { Redis } from '../src/cache/ioredis.js'
import postgres from 'postgres'
import { fetchNode, imageNodeVersion, versionOf } from '../scripts/image-node.js'

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..')
export const ADMIN_URL = process.env.BENCH_DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres'
/** The gateways' and the CLI's ENCRYPTION_KEY (required with DATABASE_URL): every bench database is fresh. */
export const ENCRYPTION_KEY = Buffer.from('tenancy-gateway bench only key!!').toString('base64')
export const REDIS_URL = process.env.BENCH_REDIS_URL || 'redis://127.0.0.1:6379'
/** The proxied request of the throughput benches, and what bench/servers.js answers it with. */
export const PROXIED_PATH = '/v1/things/1'
export const UPSTREAM_BODY = '{"ok":true}'

export const sleep = (ms: number) => new Promise<void>((done) => setTimeout(done, ms))

/** A whole-number knob from the environment, at least `min`. */
export function envInt(name: string, fallback: number, min = 1): number {
  const raw = process.env[name]
  if (raw === undefined || raw === '') return fallback
  if (!/^\d+$/.test(raw) || Number(raw) < min) throw new Error(`${name} must be a whole number ≥ ${min}, got "${raw}"`)
  return Number(raw)
}

// ---------------------------------------------------------------------------------------------
// Ctrl-C: the first stops the load and lets the bench clean up (databases, Redis keys, children);
// a second kills the children at once.

let interrupted = false
const onStop: (() => void)[] = []
/** Every child started, killed when this process exits however it does. */
const children: ChildProcess[] = []
const alive = (child: ChildProcess) => child.exitCode === null && child.signalCode === null
const tempDirs: string[] = []
process.on('exit', () => {
  for (const child of children) if (alive(child)) child.kill('SIGKILL')
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true })
})
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (interrupted) process.exit(130)
    interrupted = true
    console.error(`\n${signal}: stopping and cleaning up (again to kill at once)…`)
    for (const stop of onStop) stop()
  })
}
export const isInterrupted = () => interrupted
export function whenInterrupted(stop: () => void): void {
  onStop.push(stop)
}
export function checkInterrupted(): void {
  if (interrupted) throw new Error('interrupted')
}

/** Runs a bench's main, and says how it failed. */
export function run(main: () => Promise<void>): void {
  main().then(
    () => {
      process.exitCode ??= 0
    },
    (err: unknown) => {
      console.error('bench failed:', interrupted ? 'interrupted' : err)
      process.exitCode = 1
    },
  )
}

// ---------------------------------------------------------------------------------------------
// The Node the servers run on (BENCH_NODE). The Dockerfile pins one (ARG NODE_IMAGE=node:26.x…),
// and the proxy's cost per request differs between Node lines by more than the gap a bench is
// after. `image` (the default): that version or its nearest (scripts/image-node.ts); this
// process's node when that fails. `current`: this process's node. Else a path to a binary.

export interface ServerNode {
  path: string
  version: string
  /** Why it is this one, for the report. */
  reason: string
}

function pickNode(): ServerNode {
  const choice = process.env.BENCH_NODE || 'image'
  const current = { path: process.execPath, version: process.version }
  if (choice === 'current') return { ...current, reason: 'BENCH_NODE=current' }
  if (choice !== 'image') {
    // Absolute: a baseline gateway starts in its own tree.
    const path = choice.includes('/') ? resolve(choice) : choice
    return { path, version: versionOf(path), reason: `BENCH_NODE=${choice}` }
  }
  const wanted = imageNodeVersion()
  if (process.version === `v${wanted}`) return { ...current, reason: "the image's" }
  try {
    const path = fetchNode(wanted)
    const version = versionOf(path)
    return { path, version, reason: version === `v${wanted}` ? "the image's" : `the nearest to the image's ${wanted}` }
  } catch (err) {
    console.error(`note: the image's node ${wanted} could not be fetched: ${(err as Error).message}`)
    return { ...current, reason: `not the image's ${wanted}, which could not be fetched` }
  }
}

let chosenNode: ServerNode | null = null
export function serverNode(): ServerNode {
  chosenNode ??= pickNode()
  return chosenNode
}

// ---------------------------------------------------------------------------------------------
// Child processes: servers that listen on a port given to them, and the gateway as the image
// runs it (compiled by tsc, with the node flags of the Dockerfile's CMD and its NODE_OPTIONS).
// Under tsx, esbuild's keepNames makes every closure the gateway creates per request also call a
// function that names it, which the image never does.

export async function freePorts(n: number): Promise<number[]> {
  // All held open at once, so that they differ.
  const servers = await Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<net.Server>((done, fail) => {
          const server = net.createServer().once('error', fail)
          server.listen(0, '127.0.0.1', () => done(server))
        }),
    ),
  )
  const ports = servers.map((s) => (s.address() as AddressInfo).port)
  await Promise.all(servers.map((s) => new Promise<void>((done) => s.close(() => done()))))
  return ports
}

export interface Server {
  child: ChildProcess
  url: string
  /** The last 16 KiB it wrote, for the error message when it fails. */
  output: () => string
}

/** Starts `command` (a server that listens on `port`) and waits until `path` answers `status`. */
export async function startServer(
  command: string[],
  o: { port: number; cwd?: string; env?: NodeJS.ProcessEnv; path: string; status: number; timeoutMs?: number },
): Promise<Server> {
  const child = spawn(command[0]!, command.slice(1), {
    cwd: o.cwd ?? ROOT,
    env: { ...process.env, ...o.env },
    stdio: ['pipe', 'pipe', 'pipe'],
    // Its own process group: a Ctrl-C at the terminal reaches the bench only, which stops it in order.
    detached: true,
  })
  children.push(child)
  let tail = ''
  const keep = (chunk: Buffer) => {
    tail = (tail + chunk.toString('utf8')).slice(-16_384)
  }
  child.stdout!.on('data', keep)
  child.stderr!.on('data', keep)
  const server = { child, url: `http://127.0.0.1:${o.port}`, output: () => tail }
  const deadline = Date.now() + (o.timeoutMs ?? 90_000)
  for (;;) {
    checkInterrupted()
    if (!alive(child))
      throw new Error(`${command.join(' ')} exited (${child.signalCode ?? `status ${child.exitCode}`}):\n${tail}`)
    const answer = await fetch(server.url + o.path, { signal: AbortSignal.timeout(20_000) }).then(
      (r) => r.status,
      () => null,
    )
    if (answer === o.status) return server
    if (answer !== null) throw new Error(`GET ${o.path} answered ${answer}, expected ${o.status}:\n${tail}`)
    if (Date.now() > deadline) throw new Error(`${command.join(' ')} did not answer in time:\n${tail}`)
    await sleep(200)
  }
}

/** SIGTERM, then SIGKILL when it has not exited within graceMs; resolves to how it ended. */
export async function stopChild(
  child: ChildProcess | undefined,
  graceMs = 15_000,
): Promise<{ code: number | null; signal: string | null }> {
  if (child !== undefined && alive(child)) {
    const exited = new Promise<void>((done) => child.once('exit', () => done()))
    child.kill('SIGTERM')
    // A cleared timer, not sleep(): a pending one would hold this process open.
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs)
    await exited
    clearTimeout(timer)
  }
  return { code: child?.exitCode ?? null, signal: child?.signalCode ?? null }
}

/** A command prefix for the servers, e.g. valgrind's (bench:instructions); `websocket`: bench:websocket's servers. */
type Wrap = { wrap?: string[]; timeoutMs?: number; websocket?: boolean }

/** `delayMs`: every answer that long after its request (a slow target). */
export async function startUpstream(o: Wrap & { meter?: boolean; delayMs?: number } = {}): Promise<Server> {
  const [port] = (await freePorts(1)) as [number]
  const command = [...(o.wrap ?? []), serverNode().path, 'bench/servers.js', 'upstream']
  return startServer(command, {
    port,
    env: {
      PORT: String(port),
      WEBSOCKET: o.websocket ? '1' : '0',
      METER: o.meter ? '1' : '0',
      DELAY_MS: String(o.delayMs ?? 0),
    },
    path: PROXIED_PATH,
    status: 200,
    timeoutMs: o.timeoutMs,
  })
}

/**
 * The bare proxy (fastify + @fastify/http-proxy), the floor (node:http + an undici Pool), the floor
 * with the contract's headers, or fastify over the floor's handler, with the gateway's node flags, so that they differ from it by their code only.
 */
export async function startBare(
  upstreamUrl: string,
  o: Wrap = {},
  which: 'bare' | 'floor' | 'headers-floor' | 'fastify-floor' = 'bare',
): Promise<Server> {
  const [port] = (await freePorts(1)) as [number]
  const command = [...(o.wrap ?? []), serverNode().path, ...imageNode(ROOT).flags, 'bench/servers.js', which]
  return startServer(command, {
    port,
    env: {
      PORT: String(port),
      UPSTREAM_URL: upstreamUrl,
      NODE_OPTIONS: profiled(process.env.NODE_OPTIONS ?? ''),
      WEBSOCKET: o.websocket ? '1' : '0',
    },
    path: PROXIED_PATH,
    status: 200,
    timeoutMs: o.timeoutMs,
  })
}

/** What bench/servers.js receiver has been sent: each delivery's webhook-id and arrival (ms since the epoch). */
export interface Received {
  total: number
  received: [id: string, at: number][]
}

/** The webhook receiver of bench/servers.js, in its own process: 204 to every POST. */
export async function startReceiver(): Promise<Server & { received: (from?: number) => Promise<Received> }> {
  const [port] = (await freePorts(1)) as [number]
  const server = await startServer([serverNode().path, 'bench/servers.js', 'receiver'], {
    port,
    env: { PORT: String(port) },
    path: '/received',
    status: 200,
  })
  const received = async (from = 0) => (await (await fetch(`${server.url}/received?from=${from}`)).json()) as Received
  return { ...server, received }
}

/**
 * How a tree's image starts node: the flags of its Dockerfile's last `CMD ["node", …, "dist/main.js"]`
 * and the NODE_OPTIONS it sets (the heap cap), so that a bench cannot drift from the image.
 */
export function imageNode(tree: string): { flags: string[]; options: string } {
  const dockerfile = readFileSync(resolve(tree, 'Dockerfile'), 'utf8')
  const cmd = [...dockerfile.matchAll(/^CMD (\[.*\])\s*$/gm)].at(-1)
  const args = cmd === undefined ? null : (JSON.parse(cmd[1]!) as unknown)
  if (!Array.isArray(args) || args[0] !== 'node' || args.at(-1) !== 'dist/main.js')
    throw new Error(`${tree}/Dockerfile: expected CMD ["node", …, "dist/main.js"]`)
  return {
    flags: args.slice(1, -1) as string[],
    options: /NODE_OPTIONS=("[^"]*"|\S+)/.exec(dockerfile)?.[1]?.replaceAll('"', '') ?? '',
  }
}

/**
 * A detached git worktree of `commit` in a temporary directory, for a baseline gateway in the same
 * run: its node_modules a link to this tree's when package-lock.json is the same in both (else
 * `npm ci` there). remove() takes the worktree away again; so does this process's exit.
 */
export function baselineCheckout(commit: string): {
  tree: string
  commit: string
  linked: boolean
  remove: () => void
} {
  const git = (...args: string[]) =>
    execFileSync('git', ['-C', ROOT, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim()
  const full = git('rev-parse', '--verify', `${commit}^{commit}`)
  const tree = mkdtempSync(resolve(os.tmpdir(), 'tgw-bench-baseline-'))
  git('worktree', 'add', '--detach', tree, full)
  let removed = false
  const remove = () => {
    if (removed) return
    removed = true
    // The link first, so that nothing can follow it into this tree's node_modules. unlink, not
    // rmSync: Node 20's rmSync refuses a link to a directory (EISDIR).
    const modules = resolve(tree, 'node_modules')
    if (existsSync(modules) && lstatSync(modules).isSymbolicLink()) unlinkSync(modules)
    else rmSync(modules, { recursive: true, force: true }) // its own, from npm ci
    try {
      git('worktree', 'remove', '--force', tree)
    } catch {
      rmSync(tree, { recursive: true, force: true })
      git('worktree', 'prune')
    }
  }
  process.on('exit', remove)
  // Compared with this tree's file as it is, committed or not.
  const linked = spawnSync('git', ['-C', ROOT, 'diff', '--quiet', full, '--', 'package-lock.json']).status === 0
  try {
    if (linked) symlinkSync(resolve(ROOT, 'node_modules'), resolve(tree, 'node_modules'))
    else execFileSync('npm', ['ci', '--no-audit', '--no-fund'], { cwd: tree, stdio: 'inherit' })
  } catch (err) {
    remove()
    throw err
  }
  return { tree, commit: full.slice(0, 7), linked, remove }
}

const builds = new Map<string, string>()
/**
 * `tree`'s gateway compiled as the Dockerfile does (tsc -p tsconfig.build.json, the migrations
 * beside it) into a temporary directory, removed when this process exits; its node_modules linked.
 */
function buildDist(tree: string): string {
  const built = builds.get(tree)
  if (built !== undefined) return built
  const dir = mkdtempSync(resolve(os.tmpdir(), 'tgw-bench-dist-'))
  tempDirs.push(dir)
  console.error(`compiling the gateway of ${tree}…`)
  execFileSync(
    resolve(ROOT, 'node_modules/.bin/tsc'),
    ['-p', 'tsconfig.build.json', '--outDir', resolve(dir, 'dist')],
    { cwd: tree, stdio: 'inherit' },
  )
  cpSync(resolve(tree, 'src/store/migrations'), resolve(dir, 'dist/store/migrations'), { recursive: true })
  // dist/*.js are ES modules by its "type", and the OpenAPI document reads its version.
  cpSync(resolve(tree, 'package.json'), resolve(dir, 'package.json'))
  symlinkSync(resolve(tree, 'node_modules'), resolve(dir, 'node_modules'))
  builds.set(tree, dir)
  return dir
}

export interface Gateway extends Server {
  metricsPort: number
  /** The node command line, for the report. */
  command: string
}

/**
 * BENCH_PROFILE=<dir>: every gateway and bare proxy also writes a V8 CPU profile there when it stops
 * (`bench/profile-summary.ts <file>` prints where its time went).
 */
function profiled(nodeOptions: string): string {
  const dir = process.env.BENCH_PROFILE
  return dir ? `${nodeOptions} --cpu-prof --cpu-prof-dir=${resolve(dir)}`.trim() : nodeOptions
}

/** A gateway process on `databaseUrl`, LOG_LEVEL=warn, ready when an unauthenticated call gets its 401. */
export async function startGateway(
  o: Wrap & {
    databaseUrl: string
    upstreamUrl: string
    tree?: string
    env?: NodeJS.ProcessEnv
    /** Node's or V8's flags after the image's (V8's are refused in NODE_OPTIONS). */
    nodeFlags?: string[]
  },
): Promise<Gateway> {
  const tree = o.tree ?? ROOT
  const [port, metricsPort] = (await freePorts(2)) as [number, number]
  const image = imageNode(tree)
  const args = [...image.flags, ...(o.nodeFlags ?? []), resolve(buildDist(tree), 'dist/main.js')]
  const env = {
    HOST: '127.0.0.1',
    PORT: String(port),
    METRICS_PORT: String(metricsPort),
    DATABASE_URL: o.databaseUrl,
    ENCRYPTION_KEY,
    REDIS_URL,
    UPSTREAM_URL: o.upstreamUrl,
    LOG_LEVEL: 'warn',
    GATEWAY_CONFIG: resolve(tree, 'config/gateway.yaml'),
    NODE_OPTIONS: profiled(image.options),
    // Benches drive the management API far faster than the default 50 calls a second per parent.
    MANAGEMENT_RATE: '1000000000/1s',
    ...o.env,
  }
  const server = await startServer([...(o.wrap ?? []), serverNode().path, ...args], {
    port,
    cwd: tree,
    env,
    path: '/v1/sub-accounts',
    status: 401,
    timeoutMs: o.timeoutMs,
  })
  return { ...server, metricsPort, command: `NODE_OPTIONS=${image.options} node ${args.join(' ')}` }
}

/** The operator CLI of `tree` (default this one), under tsx: a baseline checkout's runs its own migrations. */
export function runCli(args: string[], env: NodeJS.ProcessEnv, tree = ROOT): Promise<string> {
  return new Promise((done, fail) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', 'src/cli.ts', ...args],
      // Minutes: under tsx, on a machine loaded to 30 on 2 cores, a command took more than one.
      { cwd: tree, env: { ...process.env, ENCRYPTION_KEY, ...env }, timeout: 300_000 },
      (err, stdout, stderr) => {
        if (err) fail(new Error(`cli ${args.join(' ')}: ${stderr.trim() || err.message}`))
        else done(stdout)
      },
    )
  })
}

/** A sub-account's or an account's limits, as the management API takes them (docs/api.md). */
export interface BenchLimits {
  rate?: { requests: number; per_seconds: number }
  monthly_quota?: { requests: number }
  /** Set them as shadow limits (counted, never refusing), with no enforced ones. */
  shadow?: true
  /** Required credits by meter (a sub-account's only: docs/api.md, Credits). */
  credits?: Record<string, { required: true }>
}

/**
 * One parent (by the CLI) with one sub-account (by the API, `ext:bench-sub`), and the headers of
 * the parent's key acting as it: the request of bench:proxy and bench:instructions. Limits, if
 * given: the account's set by the CLI's `accounts limits`, the sub-account's on its creation.
 */
/** A sub-account's `limits` as the API takes them: shadow ones under `shadow`. */
function subAccountLimits(limits: BenchLimits | undefined): unknown {
  if (limits?.shadow !== true) return limits
  const { shadow: _, ...members } = limits
  return { shadow: members }
}

export async function seedActing(
  gateway: Gateway,
  databaseUrl: string,
  o: { account?: BenchLimits; subAccount?: BenchLimits } = {},
): Promise<{ parentId: string; subId: string; headers: Record<string, string> }> {
  const cliEnv = { DATABASE_URL: databaseUrl, REDIS_URL }
  const parent = JSON.parse(await runCli(['accounts', 'create', '--name', 'bench'], cliEnv)) as {
    account: { id: string }
    api_key: string
  }
  const authorization = `Bearer ${parent.api_key}`
  if (o.account !== undefined) {
    const { rate, monthly_quota: quota } = o.account
    const limits = [
      ...(o.account.shadow === true ? ['--shadow'] : []),
      ...(rate === undefined ? [] : ['--rate', `${rate.requests}/${rate.per_seconds}s`]),
      ...(quota === undefined ? [] : ['--monthly-quota', String(quota.requests)]),
    ]
    await runCli(['accounts', 'limits', '--account', parent.account.id, ...limits], cliEnv)
  }
  // Under valgrind (bench:instructions) a store lookup can miss its deadline: 503, and again. A
  // Redis whose limits' keys are new refuses every lease for 3 s (docs/internals.md, limits),
  // the management API's rate included: 429, and again.
  // A 503 may come after the sub-account was made: the retry names the same Idempotency-Key, and
  // acts as the parent itself (a write without the acting header is refused once the parent has
  // an active sub-account).
  const idempotencyKey = `bench-seed-${randomUUID()}`
  let answer = { status: 0, body: '', ms: 0 }
  for (let attempt = 0; attempt < 10 && answer.status !== 201; attempt++) {
    if (attempt > 0) await sleep(1000)
    const call: Call = {
      method: 'POST',
      path: '/v1/sub-accounts',
      headers: { authorization, 'x-service-acting-tenant': 'self', 'idempotency-key': idempotencyKey },
      body: JSON.stringify({ name: 'bench-sub', external_id: 'bench-sub', limits: subAccountLimits(o.subAccount) }),
    }
    answer = await request(new http.Agent(), new URL(gateway.url), call, 600_000)
    if (answer.status !== 201 && answer.status !== 503 && answer.status !== 429) break
  }
  // The 503 came after the sub-account was made, and its answer was not kept: the retry is told
  // so, with the sub-account's id (docs/api.md, Idempotency).
  const lost =
    answer.status === 409 && answer.body.includes('idempotency_answer_lost')
      ? /sub_account ([0-9a-f-]{36})/.exec(answer.body)?.[1]
      : undefined
  if (answer.status !== 201 && lost === undefined)
    throw new Error(`POST /v1/sub-accounts answered ${answer.status}: ${answer.body.slice(0, 500)}`)
  return {
    parentId: parent.account.id,
    subId: lost ?? (JSON.parse(answer.body) as { id: string }).id,
    headers: { authorization, 'x-service-acting-tenant': 'ext:bench-sub' },
  }
}

/**
 * A parent (by the CLI) whose sub-account `ext:bench-sub` needs a credit of `tokens`, granted
 * 10^12 units by the API: far beyond what a run burns (the upstream reports 42 an answer). The
 * gateway must have a route reporting `tokens` (a grant of a meter no route reports is refused).
 */
export async function seedCredited(gateway: Gateway, databaseUrl: string): ReturnType<typeof seedActing> {
  const seeded = await seedActing(gateway, databaseUrl, { subAccount: { credits: { tokens: { required: true } } } })
  const granted = await request(new http.Agent(), new URL(gateway.url), {
    method: 'POST',
    path: `/v1/sub-accounts/${seeded.subId}/credits/grants`,
    headers: { authorization: seeded.headers.authorization!, 'x-service-acting-tenant': 'self' },
    body: JSON.stringify({ meter: 'tokens', units: 1e12 }),
  })
  if (granted.status !== 201) throw new Error(`the credit's grant answered ${granted.status}: ${granted.body}`)
  return seeded
}

// ---------------------------------------------------------------------------------------------
// Requests one at a time, for latencies: bench:management and bench:scale over one keep-alive
// socket, bench:soak's workers over a pool each.

export interface Call {
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE'
  path: string
  headers?: Record<string, string>
  /** JSON text. */
  body?: string
}
export interface Answer {
  status: number
  body: string
  /** From sending to the answer's last byte. */
  ms: number
}

export function request(agent: http.Agent, base: URL, call: Call, timeoutMs = 10_000): Promise<Answer> {
  return new Promise((done, fail) => {
    const started = performance.now()
    const headers: Record<string, string | number> = {
      ...call.headers,
      'content-length': Buffer.byteLength(call.body ?? ''),
    }
    if (call.body !== undefined) headers['content-type'] = 'application/json'
    const req = http.request(
      {
        agent,
        host: base.hostname,
        port: base.port,
        method: call.method,
        path: call.path,
        headers,
        timeout: timeoutMs,
      },
      (res) => {
        const chunks: Buffer[] = []
        res.on('data', (chunk: Buffer) => chunks.push(chunk))
        res.on('end', () =>
          done({
            status: res.statusCode!,
            body: Buffer.concat(chunks).toString('utf8'),
            ms: performance.now() - started,
          }),
        )
        res.on('error', fail)
      },
    )
    req.on('timeout', () => req.destroy(new Error('timeout')))
    req.on('error', (err: NodeJS.ErrnoException) => fail(new Error(err.code ?? err.message)))
    req.end(call.body)
  })
}

/** `call` through one keep-alive socket, failing on any status but `status`; resolves to the body. */
export function client(url: string): (call: Call, status: number) => Promise<string> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  const base = new URL(url)
  return async (call, status) => {
    const answer = await request(agent, base, call)
    if (answer.status !== status)
      throw new Error(
        `${call.method} ${call.path}: expected ${status}, got ${answer.status}: ${answer.body.slice(0, 400)}`,
      )
    return answer.body
  }
}

export interface Op {
  name: string
  /** Timed samples, when not the run's n. */
  count?: number
  /** Prepares sample i, untimed (a cache state, a warming request), and returns its timed part. */
  sample: (i: number) => Promise<() => Promise<unknown>>
}
export interface OpResult {
  name: string
  p50: number
  p99: number
  /** What `probe`'s readings moved by per timed sample. */
  perSample: number[]
}

/**
 * Round i takes sample i of every operation that has samples left, so that the noise of a shared
 * machine lands on all operations alike instead of on one of them. `warmup` rounds are not timed.
 */
export async function measureInTurn(
  ops: Op[],
  o: { n: number; warmup: number; probe?: () => Promise<number[]> },
): Promise<OpResult[]> {
  const times = ops.map(() => [] as number[])
  const moved = ops.map(() => [] as number[])
  const rounds = o.warmup + Math.max(...ops.map((op) => op.count ?? o.n))
  for (let i = 0; i < rounds; i++) {
    for (const [k, op] of ops.entries()) {
      if (i >= o.warmup + (op.count ?? o.n)) continue
      checkInterrupted()
      const timed = await op.sample(i)
      const before = (await o.probe?.()) ?? []
      const t0 = performance.now()
      await timed()
      const elapsed = performance.now() - t0
      if (i < o.warmup) continue
      times[k]!.push(elapsed)
      const after = (await o.probe?.()) ?? []
      for (const [j, v] of after.entries()) moved[k]![j] = (moved[k]![j] ?? 0) + v - before[j]!
    }
    if ((i + 1) % 500 === 0) console.error(`    round ${i + 1} / ${rounds}`)
  }
  return ops.map((op, k) => {
    const sorted = times[k]!.sort((a, b) => a - b)
    return {
      name: op.name,
      p50: percentile(sorted, 0.5),
      p99: percentile(sorted, 0.99),
      perSample: moved[k]!.map((v) => v / sorted.length),
    }
  })
}

// ---------------------------------------------------------------------------------------------
// Stores.

/** A fresh database on BENCH_DATABASE_URL's server; drop() removes it. */
export async function createDatabase(label: string): Promise<{ name: string; url: string; drop: () => Promise<void> }> {
  const name = `tgw_${label}_${randomBytes(5).toString('hex')}`
  const admin = () => postgres(ADMIN_URL, { max: 1, onnotice: () => {} })
  const sql = admin()
  await sql.unsafe(`create database ${name}`).finally(() => sql.end())
  const url = new URL(ADMIN_URL)
  url.pathname = `/${name}`
  const drop = async () => {
    const sql = admin()
    await sql
      .unsafe(`drop database if exists ${name} with (force)`)
      .catch((err) => console.error(`dropping ${name} failed; drop it by hand:`, err))
      .finally(() => sql.end())
  }
  return { name, url: url.toString(), drop }
}

/** Deletes every Redis key under `prefix` (SCAN + UNLINK); never the others'. */
export async function deleteRedisPrefix(prefix: string): Promise<number> {
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1, retryStrategy: () => null })
  redis.on('error', () => {})
  try {
    let [cursor, deleted] = ['0', 0]
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000)
      cursor = next
      if (keys.length > 0) deleted += await redis.unlink(...keys)
    } while (cursor !== '0')
    return deleted
  } finally {
    redis.disconnect()
  }
}

// ---------------------------------------------------------------------------------------------
// Readings.

export type Scrape = Map<string, number>
/** A gateway's /metrics as series → value; null when it does not answer. */
export async function scrape(metricsPort: number): Promise<Scrape | null> {
  try {
    const response = await fetch(`http://127.0.0.1:${metricsPort}/metrics`, { signal: AbortSignal.timeout(3000) })
    const series: Scrape = new Map()
    for (const line of (await response.text()).split('\n')) {
      const match = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/.exec(line)
      if (match !== null) series.set(match[1]! + (match[2] ?? ''), Number(match[3]))
    }
    return series
  } catch {
    return null
  }
}

/** The sum of a metric's series whose labels include every `label="value"` given; NaN without a scrape. */
export function metric(scraped: Scrape | null | undefined, name: string, ...labels: string[]): number {
  if (scraped == null) return Number.NaN
  // A labelled counter has no series until its first increment: absent is 0.
  let sum = 0
  for (const [series, value] of scraped) {
    if ((series === name || series.startsWith(`${name}{`)) && labels.every((l) => series.includes(l))) sum += value
  }
  return sum
}

const CLOCK_TICKS = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100

/**
 * CPU seconds (user + system) a process has used, from /proc (Linux; NaN elsewhere). Unlike req/s,
 * which moves with whatever else the machine runs, CPU per request is the server's own cost.
 * `thread: 'main'`: its main thread's alone (the event loop's), not V8's and libuv's other threads.
 */
export function cpuSeconds(
  pid: number | undefined,
  thread: 'all' | 'main' = 'all',
  part: 'both' | 'system' = 'both',
): number {
  try {
    const stat = thread === 'all' ? `/proc/${pid}/stat` : `/proc/${pid}/task/${pid}/stat`
    // The fields after the command name, which is in parentheses and may hold spaces.
    const fields = readFileSync(stat, 'utf8').split(') ')[1]!.split(' ')
    return ((part === 'both' ? Number(fields[11]) : 0) + Number(fields[12])) / CLOCK_TICKS
  } catch {
    return Number.NaN
  }
}

/**
 * Nanoseconds a process's threads have run so far, from each thread's /proc schedstat (NaN off
 * Linux): what cpuSeconds counts, without its clock ticks (10 ms), for rounds too short for them.
 * A thread that ended between two readings takes its time with it (a gateway's threads last).
 */
export function cpuNanos(pid: number | undefined): number {
  try {
    let sum = 0
    for (const task of readdirSync(`/proc/${pid}/task`))
      sum += Number(readFileSync(`/proc/${pid}/task/${task}/schedstat`, 'utf8').split(' ')[0])
    return sum
  } catch {
    return Number.NaN
  }
}

/**
 * The read and write system calls a process has made so far (/proc/<pid>/io's syscr and syscw:
 * read, readv, write, writev… on every descriptor, sockets included); NaN off Linux.
 */
export function syscalls(pid: number | undefined): { reads: number; writes: number } {
  try {
    const io = readFileSync(`/proc/${pid}/io`, 'utf8')
    const field = (name: string) => Number(new RegExp(`^${name}: (\\d+)$`, 'm').exec(io)?.[1] ?? Number.NaN)
    return { reads: field('syscr'), writes: field('syscw') }
  } catch {
    return { reads: Number.NaN, writes: Number.NaN }
  }
}

/** CPU time so far, in ticks, all of it and the idle part: the machine's (/proc/stat's first line), then each CPU's. */
function machineTicks(): { total: number; idle: number }[] {
  try {
    return readFileSync('/proc/stat', 'utf8')
      .split('\n')
      .filter((line) => /^cpu\d* /.test(line))
      .map((line) => {
        const ticks = line.split(/\s+/).slice(1, 9).map(Number)
        return { total: ticks.reduce((sum, n) => sum + n, 0), idle: ticks[3]! + ticks[4]! }
      })
  } catch {
    return []
  }
}

/** The idle share of each of machineTicks' lines between two readings. */
const idleShares = (before: { total: number; idle: number }[], after: { total: number; idle: number }[]) =>
  after.map((a, i) => (a.idle - before[i]!.idle) / (a.total - before[i]!.total))

// ---------------------------------------------------------------------------------------------
// CPU pinning: on a machine of two cores, the server measured and everything else (the load, the
// upstream, Postgres) take each other's core at moments the scheduler picks. Pinned, the server
// has a core of its own and the others' CPU no longer counts against it (bench/README.md, the
// request log: it steadies the control, not the spread of on/off).

/** Where pinned processes run: `server` the measured one's CPU, `rest` the others'; null when not pinned. */
export interface Pinning {
  server: string
  rest: string
}

/**
 * BENCH_PIN=1 (where taskset is and the machine has two CPUs or more): the measured servers on the
 * first CPU, the rest on the others. Otherwise (the default) wherever the scheduler puts them.
 */
export function pinning(): Pinning | null {
  if (process.env.BENCH_PIN !== '1') return null
  const cpus = allowedCpus()
  if (cpus.length < 2) return null
  try {
    execFileSync('taskset', ['-p', String(process.pid)], { stdio: 'ignore' })
  } catch {
    return null
  }
  return { server: String(cpus[0]), rest: cpus.slice(1).join(',') }
}

/** The ids of the CPUs this process may run on (a cpuset may hold `4-7`, not `0-3`); none off Linux. */
function allowedCpus(): number[] {
  try {
    const list = /^Cpus_allowed_list:\s*(\S+)$/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? ''
    return list.split(',').flatMap((part) => {
      const [first, last = first] = part.split('-').map(Number) as [number, number?]
      return Array.from({ length: last - first + 1 }, (_, i) => first + i)
    })
  } catch {
    return []
  }
}

/** The command prefix that starts a process on `cpus` (Wrap.wrap); none when not pinned. */
export const pinnedTo = (cpus: string | undefined): string[] => (cpus === undefined ? [] : ['taskset', '-c', cpus])

/** Moves running processes, all their threads, onto `cpus`; says which could not be moved (ended, or not ours). */
export function pin(pids: readonly number[], cpus: string): void {
  for (const pid of pids) {
    try {
      execFileSync('taskset', ['-a', '-p', '-c', cpus, String(pid)], { stdio: 'ignore' })
    } catch {
      console.error(`pinning: process ${pid} was not moved to CPU ${cpus}`)
    }
  }
}

export function rssBytes(pid: number | undefined): number {
  try {
    return Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? Number.NaN) * 1024
  } catch {
    return Number.NaN
  }
}

// ---------------------------------------------------------------------------------------------
// The load loop: autocannon, with latencies kept here in float milliseconds (its own histogram
// keeps whole ones, too coarse for sub-millisecond differences) and the server's CPU per request.

interface AutocannonResult {
  duration: number
  errors: number
  timeouts: number
  statusCodeStats: Record<string, { count: number }>
  requests: { total: number }
}
interface AutocannonInstance {
  on(event: 'response', listener: (client: unknown, status: number, bytes: number, ms: number) => void): void
  stop(): void
}
type Autocannon = (
  opts: Record<string, unknown>,
  cb: (err: Error | null, result: AutocannonResult) => void,
) => AutocannonInstance
let autocannon: Autocannon | null = null
let running: AutocannonInstance | null = null
whenInterrupted(() => running?.stop())

/** A measured round as the benches log it on stderr, `label` first (side and round). */
export function roundLine(label: string, r: Measured): string {
  return `  ${label}: ${fmt(r.perSecond)} req/s, p50 ${r.p50.toFixed(3)} ms, p99 ${r.p99.toFixed(3)} ms, ${r.cpuMicros.toFixed(1)} µs CPU/request`
}

export interface Measured {
  requests: number
  perSecond: number
  p50: number
  p99: number
  /** µs of CPU the server process spent per request; NaN off Linux. */
  cpuMicros: number
  /** The same, its main thread's alone. */
  mainThreadMicros: number
  /** Of which in the kernel (its system calls: the sockets' reads and writes). */
  mainThreadSystemMicros: number
  /** Read and write system calls of the server process per request (syscalls()). */
  readsPerRequest: number
  writesPerRequest: number
  /** The share of the machine's CPU time that was idle meanwhile; NaN off Linux. */
  idleShare: number
  /** The same, of each CPU (where the pinned processes ran: pinning()); empty off Linux. */
  cpuIdleShares: number[]
  statuses: Record<string, number>
}

/**
 * GET `path` (default PROXIED_PATH) for `seconds` (or `amount` requests) over `connections`
 * keep-alive connections. Anything but an `allowed` status, or a 200 without the upstream's body,
 * fails the bench. `vary` gives headers per request; `onResponse` sees each answer.
 */
export async function load(o: {
  url: string
  path?: string
  /** GET unless told; a POST sends `body()` (a new one per request). */
  method?: 'GET' | 'POST'
  body?: () => string
  headers: Record<string, string>
  connections: number
  seconds?: number
  amount?: number
  /** Requests a second in all, instead of as many as the server takes (autocannon's overallRate). */
  rate?: number
  pid?: number | undefined
  vary?: () => Record<string, string>
  allowed?: readonly number[]
  onResponse?: () => void
  /** The body every 200 must have: the upstream's (default), or null for any (a decision's is empty). */
  expectBody?: string | null
}): Promise<Measured> {
  checkInterrupted()
  let latencies = new Float64Array(1 << 16)
  let n = 0
  let wrongBodies = 0
  const vary = o.vary
  const cpuBefore = cpuSeconds(o.pid)
  const mainBefore = cpuSeconds(o.pid, 'main')
  const mainSystemBefore = cpuSeconds(o.pid, 'main', 'system')
  const machineBefore = machineTicks()
  const syscallsBefore = syscalls(o.pid)
  autocannon ??= createRequire(import.meta.url)('autocannon') as Autocannon
  const result = await new Promise<AutocannonResult>((done, fail) => {
    running = autocannon!(
      {
        url: o.url,
        connections: o.connections,
        headers: o.headers,
        ...(o.amount === undefined ? { duration: o.seconds } : { amount: o.amount, timeout: 30 }),
        ...(o.rate === undefined ? {} : { overallRate: o.rate }),
        requests: [
          {
            method: o.method ?? 'GET',
            path: o.path ?? PROXIED_PATH,
            ...(vary === undefined && o.body === undefined
              ? {}
              : {
                  setupRequest: (req: { headers?: Record<string, string> }) => ({
                    ...req,
                    headers: { ...req.headers, ...vary?.() },
                    ...(o.body === undefined ? {} : { body: o.body() }),
                  }),
                }),
            onResponse: (status: number, body: string) => {
              if (status === 200 && o.expectBody !== null && body !== (o.expectBody ?? UPSTREAM_BODY)) wrongBodies++
            },
          },
        ],
      },
      (err, res) => (err ? fail(err) : done(res)),
    )
    running.on('response', (_client, _status, _bytes, ms) => {
      if (n === latencies.length) {
        const grown = new Float64Array(n * 2)
        grown.set(latencies)
        latencies = grown
      }
      latencies[n++] = ms
      o.onResponse?.()
    })
  })
  running = null
  const cpu = cpuSeconds(o.pid) - cpuBefore
  const mainCpu = cpuSeconds(o.pid, 'main') - mainBefore
  const mainSystem = cpuSeconds(o.pid, 'main', 'system') - mainSystemBefore
  const idle = idleShares(machineBefore, machineTicks())
  const syscallsAfter = syscalls(o.pid)
  checkInterrupted()
  const statuses = Object.fromEntries(Object.entries(result.statusCodeStats).map(([code, { count }]) => [code, count]))
  const unexpected = Object.keys(statuses).filter((code) => !(o.allowed ?? [200]).includes(Number(code)))
  if (unexpected.length > 0 || result.errors > 0 || result.timeouts > 0 || wrongBodies > 0 || n === 0) {
    throw new Error(
      `statuses ${counts(statuses)}, ${result.errors} errors, ${result.timeouts} timeouts, ${wrongBodies} bodies other than ${UPSTREAM_BODY}`,
    )
  }
  const sorted = latencies.subarray(0, n).sort()
  const requests = result.requests.total
  return {
    requests,
    perSecond: requests / result.duration,
    p50: percentile(sorted, 0.5),
    p99: percentile(sorted, 0.99),
    cpuMicros: (cpu * 1e6) / requests,
    mainThreadMicros: (mainCpu * 1e6) / requests,
    mainThreadSystemMicros: (mainSystem * 1e6) / requests,
    readsPerRequest: (syscallsAfter.reads - syscallsBefore.reads) / requests,
    writesPerRequest: (syscallsAfter.writes - syscallsBefore.writes) / requests,
    idleShare: idle[0] ?? Number.NaN,
    cpuIdleShares: idle.slice(1),
    statuses,
  }
}

/** A side's rounds as one row: the medians, and the requests summed. */
export function medianOf(rounds: Measured[]): Measured {
  const pick = (
    key:
      | 'perSecond'
      | 'p50'
      | 'p99'
      | 'cpuMicros'
      | 'mainThreadMicros'
      | 'mainThreadSystemMicros'
      | 'readsPerRequest'
      | 'writesPerRequest'
      | 'idleShare',
  ) => median(rounds.map((r) => r[key]))
  const requests = rounds.reduce((sum, r) => sum + r.requests, 0)
  return {
    requests,
    perSecond: pick('perSecond'),
    p50: pick('p50'),
    p99: pick('p99'),
    cpuMicros: pick('cpuMicros'),
    mainThreadMicros: pick('mainThreadMicros'),
    mainThreadSystemMicros: pick('mainThreadSystemMicros'),
    readsPerRequest: pick('readsPerRequest'),
    writesPerRequest: pick('writesPerRequest'),
    idleShare: pick('idleShare'),
    cpuIdleShares: (rounds[0]?.cpuIdleShares ?? []).map((_, cpu) => median(rounds.map((r) => r.cpuIdleShares[cpu]!))),
    statuses: {},
  }
}

/** The columns of a round in a report, and its cells. */
export const ROUND_COLUMNS = ['requests', 'req/s', 'p50 ms', 'p99 ms', 'CPU µs/req', 'reads/req', 'writes/req']
export const roundCells = (r: Measured) => [
  fmt(r.requests),
  fmt(r.perSecond),
  r.p50.toFixed(3),
  r.p99.toFixed(3),
  r.cpuMicros.toFixed(1),
  r.readsPerRequest.toFixed(2),
  r.writesPerRequest.toFixed(2),
]

// ---------------------------------------------------------------------------------------------
// Figures and reports.

/** Nearest-rank percentile of sorted values. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  return sorted[Math.max(0, Math.ceil(p * sorted.length) - 1)]!
}

export function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

/**
 * Round by round, CPU per request of `on` over `off`'s in the same round (`on[i]` beside `off[i]`):
 * each ratio, their median and quartiles.
 */
export function roundRatios(
  on: readonly Measured[],
  off: readonly Measured[],
): { each: number[]; median: number; q1: number; q3: number } {
  const each = on.map((r, i) => r.cpuMicros / off[i]!.cpuMicros)
  const sorted = [...each].sort((a, b) => a - b)
  return { each, median: median(each), q1: percentile(sorted, 0.25), q3: percentile(sorted, 0.75) }
}

/**
 * On over off across pairs of processes, each pair with its rounds (on[i] beside off[i]): the
 * geometric mean of each pair's ratio of medians, and the range that 95 % of resamplings give,
 * drawing pairs and then each drawn pair's rounds (a process's lasting bias counts as the noise
 * it is). One pair: its ratio of medians, and its rounds' range alone.
 */
export function pairsRatio(pairs: { on: number[]; off: number[] }[], draws = 2_000): [number, number, number] {
  const meanOfLogs = (ratios: number[]) => Math.exp(ratios.reduce((sum, r) => sum + Math.log(r), 0) / ratios.length)
  const ratioOf = (on: number[], off: number[], picks: number[]) =>
    median(picks.map((i) => on[i]!)) / median(picks.map((i) => off[i]!))
  const all = (n: number) => Array.from({ length: n }, (_, i) => i)
  const pick = (n: number) => Array.from({ length: n }, () => Math.floor(Math.random() * n))
  const estimate = meanOfLogs(pairs.map(({ on, off }) => ratioOf(on, off, all(on.length))))
  const drawn: number[] = []
  for (let draw = 0; draw < draws; draw++)
    drawn.push(
      meanOfLogs(
        pick(pairs.length).map((p) => {
          const { on, off } = pairs[p]!
          return ratioOf(on, off, pick(on.length))
        }),
      ),
    )
  drawn.sort((a, b) => a - b)
  return [estimate, drawn[Math.floor(draws * 0.025)]!, drawn[Math.floor(draws * 0.975)]!]
}

export const fmt = (n: number) => (Number.isNaN(n) ? '-' : Math.round(n).toLocaleString('en-US'))
export const ms = (n: number) => (Number.isNaN(n) ? '-' : n < 10 ? n.toFixed(2) : n < 100 ? n.toFixed(1) : n.toFixed(0))
export const counts = (record: Record<string, number>) =>
  Object.entries(record)
    .sort((a, b) => b[1] - a[1])
    .map(([k, v]) => `${k} ×${fmt(v)}`)
    .join(', ')

/** A Markdown table: the first `left` columns flush left, the others right. */
export function table(header: string[], rows: string[][], left = 1): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] ?? '').length)))
  const line = (cells: string[]) =>
    `| ${cells.map((c, i) => (i < left ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(' | ')} |`
  return [
    line(header),
    `|${widths.map((w, i) => (i < left ? `:${'-'.repeat(w + 1)}` : `${'-'.repeat(w + 1)}:`)).join('|')}|`,
    ...rows.map(line),
  ]
}

export function gitDescription(tree = ROOT): string {
  try {
    const head = execFileSync('git', ['-C', tree, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim()
    const dirty =
      execFileSync('git', ['-C', tree, 'status', '--porcelain', '--', 'src', 'config'], { encoding: 'utf8' }).trim() !==
      ''
    return dirty ? `${head} + uncommitted changes in src/ or config/` : head
  } catch {
    return 'unknown commit'
  }
}

const packageVersion = (name: string) =>
  (JSON.parse(readFileSync(resolve(ROOT, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version

/** The lines a report opens with: when, where, on what, and the command that printed it. */
export function reportHead(script: string): string[] {
  const cpus = os.cpus()
  // The knobs set, as a command line again (a URL's password hidden).
  const knobs = Object.keys(process.env)
    .filter((name) => /^(BENCH|SOAK)_/.test(name) && process.env[name] !== '')
    .sort()
    .map((name) => {
      const value = process.env[name]!
      if (!/^\w+:\/\//.test(value)) return `${name}=${value}`
      const url = new URL(value)
      if (url.password !== '') url.password = '***'
      return `${name}=${url}`
    })
  const node = chosenNode
  return [
    `date      ${new Date().toISOString()}`,
    `machine   ${cpus[0]?.model.trim() ?? '?'}, ${cpus.length} cores, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB, ${os.platform()} ${os.release()}; load average ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
    `node      ${node === null ? '' : `servers on ${node.version} (${node.reason}); `}this process on ${process.version}; fastify ${packageVersion('fastify')}, postgres ${packageVersion('postgres')}, ioredis ${packageVersion('ioredis')}, autocannon ${packageVersion('autocannon')}`,
    `code      ${gitDescription()}`,
    `command   ${[...knobs, 'npm run', script].join(' ')}`,
  ]
}
