// Helpers shared by the benches that run real processes (bench/proxy.ts, bench/soak.ts,
// bench/scale.ts, bench/instructions.ts): child processes that report their port over IPC, the gateway compiled as the
// image runs it (proxy and scale; soak runs it under tsx), the CLI, /proc readings, percentiles
// and the facts a report opens with.
import { execFile, execFileSync, fork, type ChildProcess } from 'node:child_process'
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, symlinkSync } from 'node:fs'
import net, { type AddressInfo } from 'node:net'
import os from 'node:os'
import { dirname, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..')

/** Where the benches create their databases, and the Redis they use. */
export const ADMIN_URL = process.env.BENCH_DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres'
export const REDIS_URL = process.env.BENCH_REDIS_URL || 'redis://127.0.0.1:6379'

/** The proxied request of the proxy benches, and what their upstream answers it with. */
export const PROXIED_PATH = '/v1/things/1'
export const UPSTREAM_BODY = '{"ok":true}'
/** The sub-account the bench's parent key acts as (`ext:bench-sub`). */
export const SUB_EXTERNAL_ID = 'bench-sub'

export function positiveInt(name: string, fallback: number): number {
  const raw = process.env[name]
  if (raw === undefined || raw === '') return fallback
  if (!/^[1-9]\d*$/.test(raw)) throw new Error(`${name} must be a positive integer, got "${raw}"`)
  return Number(raw)
}

export const sleep = (ms: number) => new Promise<void>((done) => setTimeout(done, ms))

// ---------------------------------------------------------------------------------------------
// Children started by fork() report their port over IPC and exit when the parent goes away.

export interface Ready {
  type: 'ready'
  port: number
}

/** In a forked child: tells the parent its port; exits when the parent goes away or on SIGTERM. */
export function announce(port: number, bench: string): void {
  if (process.send === undefined) throw new Error(`run by ${bench}, not by hand`)
  process.send({ type: 'ready', port } satisfies Ready)
  process.on('disconnect', () => process.exit(0))
  // An exit, not death by signal, so that --cpu-prof can write its profile.
  process.on('SIGTERM', () => process.exit(0))
}

/** Every child started, so that a crash of this process still takes them down (see 'exit'). */
export const children: ChildProcess[] = []
export const alive = (child: ChildProcess) => child.exitCode === null && child.signalCode === null
process.on('exit', () => {
  for (const child of children) if (alive(child)) child.kill('SIGKILL')
})

/** Forks `script` with `args` (under tsx) and waits for the port it reports (see announce). */
export async function forkChild(
  script: string,
  label: string,
  args: string[],
  options: { nodeArgs?: string[]; detached?: boolean; node?: string } = {},
): Promise<{ child: ChildProcess; port: number }> {
  const child = fork(script, args, {
    cwd: ROOT,
    execPath: options.node ?? process.execPath,
    execArgv: [...(options.nodeArgs ?? []), '--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    detached: options.detached ?? false,
  })
  children.push(child)
  const port = await new Promise<number>((done, fail) => {
    const timer = setTimeout(() => fail(new Error(`${label} did not start within 30 s`)), 30_000)
    child.once('message', (message: Ready) => {
      clearTimeout(timer)
      done(message.port)
    })
    child.once('exit', (code, signal) => {
      clearTimeout(timer)
      fail(new Error(`${label} exited before listening (${signal ?? `status ${code}`})`))
    })
  })
  return { child, port }
}

/** SIGTERM by PID, then SIGKILL when it has not exited within graceMs. */
export async function stopChild(child: ChildProcess | null, graceMs: number): Promise<void> {
  if (child === null || !alive(child)) return
  const exited = new Promise<void>((done) => child.once('exit', () => done()))
  child.kill('SIGTERM')
  // A cleared timer, not sleep(): a pending one would hold this process open for graceMs.
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs)
  await exited
  clearTimeout(timer)
}

export async function freePorts(n: number): Promise<number[]> {
  // All held open at once, so that they differ.
  const servers = await Promise.all(
    Array.from({ length: n }, () => {
      const server = net.createServer()
      return new Promise<net.Server>((done, fail) => {
        server.once('error', fail)
        server.listen(0, '127.0.0.1', () => done(server))
      })
    }),
  )
  const ports = servers.map((s) => (s.address() as AddressInfo).port)
  await Promise.all(servers.map((s) => new Promise<void>((done) => s.close(() => done()))))
  return ports
}

/** The last 16 KiB a child wrote, for the error message when it fails. */
export function captureOutput(child: ChildProcess): () => string {
  let tail = ''
  const keep = (chunk: Buffer) => {
    tail = (tail + chunk.toString('utf8')).slice(-16_384)
  }
  child.stdout?.on('data', keep)
  child.stderr?.on('data', keep)
  return () => tail
}

/**
 * Waits until the gateway answers GET /v1/sub-accounts without a key with 401.
 * `checkInterrupted` throws when the bench was interrupted meanwhile.
 */
export async function waitForGateway(base: string, gateway: ChildProcess, output: () => string, checkInterrupted: () => void): Promise<void> {
  const deadline = Date.now() + 90_000
  for (;;) {
    checkInterrupted()
    if (!alive(gateway)) throw new Error(`the gateway exited (status ${gateway.exitCode ?? gateway.signalCode}):\n${output()}`)
    try {
      const response = await fetch(`${base}/v1/sub-accounts`, { signal: AbortSignal.timeout(2000) })
      const text = await response.text()
      if (response.status === 401) return
      throw new Error(`GET /v1/sub-accounts without a key answered ${response.status}, expected 401: ${text.slice(0, 300)}`)
    } catch (err) {
      if (err instanceof Error && err.message.startsWith('GET /v1/sub-accounts')) throw err
    }
    if (Date.now() > deadline) throw new Error(`the gateway did not answer within 90 s:\n${output()}`)
    await sleep(200)
  }
}

// ---------------------------------------------------------------------------------------------
// The gateway as it ships: compiled by tsc and started with the node flags of the image's CMD.
// Under tsx (esbuild with keepNames) every closure the gateway creates per request also costs a
// call that names it, which the image never pays.

/** How a bench runs a gateway: compiled as the image is (dist), or from src/ under tsx. */
export type GatewayRuntime = 'dist' | 'tsx'

/** `raw` as a runtime; `name` (the variable it came from) names it in the error. */
export function parseGatewayRuntime(name: string, raw: string): GatewayRuntime {
  if (raw !== 'dist' && raw !== 'tsx') throw new Error(`${name}: dist or tsx, got "${raw}"`)
  return raw
}

export function gatewayRuntime(name: string, fallback: GatewayRuntime): GatewayRuntime {
  return parseGatewayRuntime(name, process.env[name] || fallback)
}

/**
 * Compiles `tree`'s gateway as the Dockerfile does (tsc -p tsconfig.build.json, the migrations
 * beside it), into a new directory under the system's temporary one, so that the tree's own
 * dist/ is left alone; the caller removes it. The tree's node_modules is linked, not copied.
 */
export function buildDist(tree: string, label: string): string {
  const dir = mkdtempSync(resolve(os.tmpdir(), `tgw-${label}-dist-`))
  try {
    execFileSync(resolve(ROOT, 'node_modules/.bin/tsc'), ['-p', 'tsconfig.build.json', '--outDir', resolve(dir, 'dist')], { cwd: tree, stdio: 'inherit' })
    cpSync(resolve(tree, 'src/store/migrations'), resolve(dir, 'dist/store/migrations'), { recursive: true })
    // dist/ops/openapi.js reads ../../package.json; "type": "module" makes dist/*.js ES modules.
    cpSync(resolve(tree, 'package.json'), resolve(dir, 'package.json'))
    symlinkSync(resolve(tree, 'node_modules'), resolve(dir, 'node_modules'))
    return dir
  } catch (err) {
    rmSync(dir, { recursive: true, force: true })
    throw err
  }
}

/**
 * The node flags of a tree's image: its Dockerfile's last `CMD ["node", …flags, "dist/main.js"]`
 * (the runtime stage's, one line, exec form), so that a bench runs the gateway as the image does
 * (V8 flags included) and cannot drift from it. The image's `NODE_OPTIONS` (a heap cap) is not
 * applied: bench:scale takes it as BENCH_GATEWAY_NODE_ARGS.
 */
export function imageNodeFlags(tree: string): string[] {
  const dockerfile = readFileSync(resolve(tree, 'Dockerfile'), 'utf8')
  const cmd = [...dockerfile.matchAll(/^CMD (\[.*\])\s*$/gm)].at(-1)
  const args = cmd === undefined ? null : (JSON.parse(cmd[1]!) as unknown)
  if (!Array.isArray(args) || !args.every((arg) => typeof arg === 'string') || args[0] !== 'node' || args.at(-1) !== 'dist/main.js') {
    throw new Error(`${tree}/Dockerfile: expected CMD ["node", …, "dist/main.js"]`)
  }
  return args.slice(1, -1) as string[]
}

/**
 * Node's arguments that start a gateway: the image's node flags, then `extra` (so a bench can
 * override one of them, e.g. `--no-enable-source-maps`), then the compiled main.js, or
 * src/main.ts under tsx.
 */
export function gatewayArgs(runtime: GatewayRuntime, tree: string, distDir: string | null, extra: readonly string[] = []): string[] {
  const flags = [...imageNodeFlags(tree), ...extra]
  if (runtime === 'tsx') return [...flags, '--import', 'tsx', 'src/main.ts']
  if (distDir === null) throw new Error('a compiled gateway needs its directory')
  return [...flags, resolve(distDir, 'dist/main.js')]
}

// ---------------------------------------------------------------------------------------------
// The Node the image ships. The Dockerfile pins one (ARG NODE_IMAGE=node:26.x…); the machine's own
// may be years older, and the proxy's cost per request differs between the two by more than the
// gap a bench is after. So by default the servers run on the image's Node, fetched once from the
// npm registry (the node-<platform>-<arch> packages carry the official binaries).

/** The Node version of a tree's image: its Dockerfile's `ARG NODE_IMAGE=node:<version>…`. */
export function imageNodeVersion(tree: string): string {
  const dockerfile = readFileSync(resolve(tree, 'Dockerfile'), 'utf8')
  const match = /^ARG NODE_IMAGE=node:(\d+\.\d+\.\d+)\b/m.exec(dockerfile)
  if (match === null) throw new Error(`${tree}/Dockerfile: expected ARG NODE_IMAGE=node:<major.minor.patch>…`)
  return match[1]!
}

const byVersion = (a: string, b: string) => {
  const [x, y] = [a, b].map((v) => v.split('.').map(Number))
  return x![0]! - y![0]! || x![1]! - y![1]! || x![2]! - y![2]!
}

const NODE_CACHE = resolve(ROOT, 'node_modules/.cache/tgw-bench-node')
const NODE_PACKAGE = `node-${process.platform}-${process.arch}`

/** The newest of `versions` in `version`'s major line that is not newer than it. */
function nearestOf(versions: string[], version: string): string | undefined {
  const major = version.split('.')[0]
  return versions
    .filter((v) => /^\d+\.\d+\.\d+$/.test(v) && v.split('.')[0] === major && byVersion(v, version) <= 0)
    .sort(byVersion)
    .at(-1)
}

/**
 * A node binary of the image's version, or else the newest one of its major line that is not newer
 * (the registry's packages can lag a release behind), from node_modules/.cache/tgw-bench-node, or
 * fetched into it from the npm registry when nothing there fits. Throws when that fails.
 */
function fetchNode(version: string): string {
  const binaryOf = (v: string) => resolve(NODE_CACHE, `${NODE_PACKAGE}-${v}`, 'bin/node')
  // Versions whose binary is here (a directory without one is a fetch that never finished).
  const cached = (existsSync(NODE_CACHE) ? readdirSync(NODE_CACHE) : [])
    .filter((entry) => entry.startsWith(`${NODE_PACKAGE}-`))
    .map((entry) => entry.slice(NODE_PACKAGE.length + 1))
    .filter((v) => existsSync(binaryOf(v)))
  const npm = (args: string[], cwd?: string) => {
    try {
      return execFileSync('npm', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })
    } catch (err) {
      throw new Error(`npm ${args.join(' ')}: ${String((err as { stderr?: string }).stderr ?? err).trim().split('\n').slice(-3).join(' ')}`)
    }
  }
  // The exact version from the cache without asking the registry; else the registry's nearest.
  if (cached.includes(version)) return binaryOf(version)
  let listed: string[] | string
  try {
    listed = JSON.parse(npm(['view', NODE_PACKAGE, 'versions', '--json'])) as string[] | string
  } catch (err) {
    // Offline: the nearest version already here will do.
    const nearest = nearestOf(cached, version)
    if (nearest !== undefined) return binaryOf(nearest)
    throw err
  }
  const chosen = nearestOf(Array.isArray(listed) ? listed : [listed], version)
  if (chosen === undefined) throw new Error(`${NODE_PACKAGE} has no ${version.split('.')[0]}.x release up to ${version}`)
  if (cached.includes(chosen)) return binaryOf(chosen)
  // Unpacked beside its final place (one filesystem, so the rename is atomic) and renamed into it:
  // a binary in the cache is always whole.
  mkdirSync(NODE_CACHE, { recursive: true })
  const work = mkdtempSync(resolve(NODE_CACHE, '.fetch-'))
  try {
    const tarball = npm(['pack', `${NODE_PACKAGE}@${chosen}`, '--silent'], work).trim().split('\n').at(-1)!
    execFileSync('tar', ['xzf', tarball], { cwd: work })
    try {
      renameSync(resolve(work, 'package'), resolve(NODE_CACHE, `${NODE_PACKAGE}-${chosen}`))
    } catch (err) {
      // Another bench fetched the same version meanwhile: use its copy.
      if (!existsSync(binaryOf(chosen))) throw err
    }
  } finally {
    rmSync(work, { recursive: true, force: true })
  }
  return binaryOf(chosen)
}

export interface ServerNode {
  /** The node binary the servers run on. */
  path: string
  version: string
  /** Why it is this one, for the report. */
  reason: string
}

/**
 * The node the benches start their servers with (BENCH_NODE): `image` (the default) for the
 * image's Node as above, falling back to this process's own with a warning when it cannot be
 * fetched; `current` for this process's own; or a path to a node binary.
 */
export function serverNode(): ServerNode {
  const choice = process.env.BENCH_NODE || 'image'
  const versionOf = (path: string) => execFileSync(path, ['--version'], { encoding: 'utf8' }).trim()
  if (choice === 'current') return { path: process.execPath, version: process.version, reason: 'BENCH_NODE=current' }
  if (choice !== 'image') {
    // Absolute, since the servers start in other directories (a baseline in its own tree).
    const path = choice.includes('/') ? resolve(choice) : choice
    return { path, version: versionOf(path), reason: `BENCH_NODE=${choice}` }
  }
  const wanted = imageNodeVersion(ROOT)
  if (process.version === `v${wanted}`) return { path: process.execPath, version: process.version, reason: "the image's" }
  try {
    const path = fetchNode(wanted)
    const version = versionOf(path)
    return { path, version, reason: version === `v${wanted}` ? "the image's" : `the nearest ${wanted.split('.')[0]}.x to the image's ${wanted}, which the npm registry lacks or could not be asked for` }
  } catch (err) {
    console.error(`note: could not fetch node ${wanted} (the image's) from the npm registry, so the servers run on ${process.version}: ${(err as Error).message}`)
    return { path: process.execPath, version: process.version, reason: `not the image's ${wanted}, which could not be fetched` }
  }
}

/** BENCH_BARE_HEADERS: `same` (the default) or `none`; see bareHeaders. */
export function bareHeadersMode(): 'same' | 'none' {
  const mode = process.env.BENCH_BARE_HEADERS || 'same'
  if (mode !== 'same' && mode !== 'none') throw new Error(`BENCH_BARE_HEADERS: same or none, got "${mode}"`)
  return mode
}

/**
 * The headers the bare proxy is sent: by default the gateway's own request (its Authorization and
 * acting header included, which the bare proxy parses and passes on), so that both sides get the
 * same traffic; BENCH_BARE_HEADERS=none sends it none, as these benches did before 14f9851.
 */
export function bareHeaders(gatewayHeaders: Record<string, string>): Record<string, string> {
  return bareHeadersMode() === 'same' ? { ...gatewayHeaders } : {}
}

export function runCli(args: string[], env: NodeJS.ProcessEnv): Promise<string> {
  return new Promise((done, fail) => {
    execFile(process.execPath, ['--import', 'tsx', 'src/cli.ts', ...args], { cwd: ROOT, env, timeout: 60_000 }, (err, stdout, stderr) => {
      if (err) fail(new Error(`cli ${args.join(' ')} failed: ${stderr.trim() || err.message}`))
      else done(stdout)
    })
  })
}

// ---------------------------------------------------------------------------------------------
// Readings and figures.

const CLOCK_TICKS_PER_SECOND = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100
  } catch {
    return 100
  }
})()

/**
 * CPU seconds a process has used so far, from /proc (Linux only; NaN elsewhere). Unlike req/s,
 * which moves with whatever else the machine runs, CPU per request is the server's own cost.
 */
export function cpuSeconds(pid: number | undefined): number {
  if (pid === undefined) return Number.NaN
  try {
    // The fields after the command name, which is in parentheses and may hold spaces.
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS_PER_SECOND
  } catch {
    return Number.NaN
  }
}

/** Nearest-rank percentile of sorted values. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  return sorted[Math.max(0, Math.ceil(p * sorted.length) - 1)]!
}

export function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

export const fmt = (n: number) => Math.round(n).toLocaleString('en-US')

export function packageVersion(name: string): string {
  try {
    return (JSON.parse(readFileSync(resolve(ROOT, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version
  } catch {
    return '?'
  }
}

export function gitDescription(tree = ROOT): string {
  try {
    const head = execFileSync('git', ['-C', tree, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim()
    const dirty = execFileSync('git', ['-C', tree, 'status', '--porcelain', '--', 'src', 'config'], { encoding: 'utf8' }).trim() !== ''
    return dirty ? `${head} + uncommitted changes in src/ or config/` : head
  } catch {
    return 'unknown commit'
  }
}

/** `NAME=value` for the report's command line, with a URL's password hidden; null when unset. */
export function envForCommand(name: string): string | null {
  const value = process.env[name]
  if (value === undefined || value === '') return null
  if (!/^\w+:\/\//.test(value)) return `${name}=${value}`
  const url = new URL(value)
  if (url.password !== '') url.password = '***'
  return `${name}=${url.toString()}`
}
