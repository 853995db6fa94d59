// Redis deployments of the test's own on loopback, from Debian's redis-server and redis-sentinel:
// one server; one master, one replica and three sentinels (quorum 2); or a cluster of three
// masters with a replica each. Nothing is written to disk that outlives the test: every server
// runs in a temporary directory with `--save '' --appendonly no`, and is killed at teardown (or
// by a watchdog, should the test process die first).
import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { Redis } from 'ioredis'
import { sleep } from './poll.js'
import { stablePort } from './ports.js'
import type { TestLike } from './test-like.js'

const run = promisify(execFile)

export type TopologyKind = 'server' | 'sentinel' | 'cluster'

export interface OwnProcess {
  port: number
  running(): boolean
  kill(): Promise<void>
  /** Stops it answering (SIGSTOP) without closing a socket: a node that hangs; resume() lets it go on. */
  pause(): void
  resume(): void
  paused(): boolean
}

/**
 * How long a master may not answer before it is failed over: short by default (a failover test
 * waits for it), long where a test is not about failover and a loaded machine may starve a master
 * for that long.
 */
export interface TopologyOptions {
  failoverAfterMs?: number
}

export interface Topology {
  kind: TopologyKind
  /** The gateway's environment for this deployment (REDIS_URL, or REDIS_SENTINELS…, or REDIS_CLUSTER_NODES). */
  env: Record<string, string>
  /** Every data node (masters and replicas). */
  servers: OwnProcess[]
  sentinels: OwnProcess[]
  /** A command on one node, through redis-cli (`port` may be a sentinel's). */
  cli(port: number, ...args: string[]): Promise<string>
  /** host:port of the master(s) now, sorted: what the gateway should follow. */
  masters(): Promise<string[]>
  /** Deletes every key on every master (a Redis that forgot). */
  flushAll(): Promise<void>
}

function watchOver(pid: number): void {
  const script = `while kill -0 ${process.pid} 2>/dev/null && kill -0 ${pid} 2>/dev/null; do sleep 0.5; done; kill -0 ${process.pid} 2>/dev/null || kill -9 ${pid} 2>/dev/null; exit 0`
  spawn('/bin/sh', ['-c', script], { stdio: 'ignore', detached: true }).unref()
}

async function cli(port: number, ...args: string[]): Promise<string> {
  const { stdout } = await run('/usr/bin/redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args], {
    timeout: 10_000,
  })
  return stdout.trim()
}

async function answers(port: number, ms: number): Promise<void> {
  const deadline = Date.now() + ms
  for (;;) {
    if ((await cli(port, 'ping').catch(() => '')) === 'PONG') return
    if (Date.now() > deadline) throw new Error(`nothing answered PING on port ${port} within ${ms} ms`)
    await sleep(50)
  }
}

/**
 * Once every test and teardown of the file has run, the process should end on its own. In some CI
 * runs a file that killed a master or ran on Sentinel hung there after passing every test, until
 * tap's timeout: something (not found yet) kept the event loop alive. Rather than cost the suite
 * minutes, it says what was still open and ends the process. Call it on the file's root test.
 */
export function endWhenDone(t: TestLike, what: string): void {
  t.teardown(() => {
    setTimeout(() => {
      process.stderr.write(
        `${what}: still open 10 s after the last teardown: ${process.getActiveResourcesInfo().join(', ')}\n`,
      )
      process.exit(process.exitCode ?? 0)
    }, 10_000).unref()
  })
}

/** Starts `binary` with `args(port)` on a free port, killed at teardown. */
async function launch(
  t: TestLike,
  dir: string,
  binary: '/usr/bin/redis-server' | '/usr/bin/redis-sentinel',
  args: (port: number) => string[],
): Promise<OwnProcess> {
  for (let attempt = 0; ; attempt++) {
    const port = await stablePort()
    let stderr = ''
    const child: ChildProcess = spawn(binary, args(port), { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] })
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
    watchOver(child.pid!)
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
    const running = () => child.exitCode === null && child.signalCode === null
    try {
      await Promise.race([
        answers(port, 10_000),
        exited.then(() => {
          throw new Error(`${binary} exited at start on port ${port}: ${stderr.trim()}`)
        }),
      ])
    } catch (err) {
      if (running()) child.kill('SIGKILL')
      await exited
      if (attempt >= 4) throw err
      continue
    }
    const kill = async () => {
      if (running()) child.kill('SIGKILL')
      await exited
    }
    t.teardown(kill)
    let stopped = false
    const signal = (name: 'SIGSTOP' | 'SIGCONT') => {
      if (running() && child.kill(name)) stopped = name === 'SIGSTOP'
    }
    return {
      port,
      running,
      kill,
      pause: () => signal('SIGSTOP'),
      resume: () => signal('SIGCONT'),
      paused: () => stopped,
    }
  }
}

const NO_DISK = ['--save', '', '--appendonly', 'no', '--bind', '127.0.0.1', '--loglevel', 'warning']
/**
 * For a server with a replica, or one that may become one: a master begins a replica's full sync at
 * once, rather than after Redis's default 5 s wait for more replicas to share it. The deployments
 * are not used before their replicas are in sync, so this only shortens their start.
 */
const SYNC_AT_ONCE = ['--repl-diskless-sync-delay', '0']

function tempDir(t: TestLike, kind: string): string {
  const dir = mkdtempSync(join(tmpdir(), `tgw-redis-${kind}-`))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

export async function startServer(t: TestLike): Promise<Topology> {
  const dir = tempDir(t, 'server')
  const server = await launch(t, dir, '/usr/bin/redis-server', (port) => ['--port', String(port), ...NO_DISK])
  return {
    kind: 'server',
    env: { REDIS_URL: `redis://127.0.0.1:${server.port}` },
    servers: [server],
    sentinels: [],
    cli,
    masters: async () => [`127.0.0.1:${server.port}`],
    flushAll: async () => void (await cli(server.port, 'flushall')),
  }
}

export const SENTINEL_NAME = 'tgwmaster'

/**
 * One master, one replica, three sentinels with quorum 2, which find the master down after 500 ms
 * (unless told otherwise) and fail over within a second or two.
 */
export async function startSentinel(t: TestLike, { failoverAfterMs = 500 }: TopologyOptions = {}): Promise<Topology> {
  const dir = tempDir(t, 'sentinel')
  const master = await launch(t, dir, '/usr/bin/redis-server', (port) => [
    '--port',
    String(port),
    ...NO_DISK,
    ...SYNC_AT_ONCE,
  ])
  const replica = await launch(t, dir, '/usr/bin/redis-server', (port) => [
    '--port',
    String(port),
    ...NO_DISK,
    ...SYNC_AT_ONCE,
    '--replicaof',
    '127.0.0.1',
    String(master.port),
  ])
  const sentinels: OwnProcess[] = []
  for (let i = 0; i < 3; i++) {
    sentinels.push(
      await launch(t, dir, '/usr/bin/redis-sentinel', (port) => {
        // Sentinel rewrites its configuration file: one of its own, in the temporary directory.
        const file = join(dir, `sentinel-${port}.conf`)
        writeFileSync(
          file,
          [
            `port ${port}`,
            'bind 127.0.0.1',
            `dir ${dir}`,
            `sentinel monitor ${SENTINEL_NAME} 127.0.0.1 ${master.port} 2`,
            `sentinel down-after-milliseconds ${SENTINEL_NAME} ${failoverAfterMs}`,
            `sentinel failover-timeout ${SENTINEL_NAME} 2000`,
            `sentinel parallel-syncs ${SENTINEL_NAME} 1`,
            '',
          ].join('\n'),
        )
        return [file, '--loglevel', 'warning']
      }),
    )
  }
  const servers = [master, replica]
  const masters = async () => {
    for (const sentinel of sentinels) {
      if (!sentinel.running() || sentinel.paused()) continue
      const reply = await cli(sentinel.port, 'sentinel', 'get-master-addr-by-name', SENTINEL_NAME).catch(() => '')
      const [host, port] = reply.split('\n')
      if (host && port) return [`${host}:${port}`]
    }
    return []
  }
  // Ready when every sentinel knows the replica and the other sentinels: a failover can then happen.
  const deadline = Date.now() + 15_000
  for (;;) {
    const known = await Promise.all(
      sentinels.map(async (s) => {
        const info = await cli(s.port, 'sentinel', 'master', SENTINEL_NAME).catch(() => '')
        const lines = info.split('\n')
        const field = (name: string) => Number(lines[lines.indexOf(name) + 1])
        return field('num-slaves') >= 1 && field('num-other-sentinels') >= 2
      }),
    )
    const replication = await cli(replica.port, 'info', 'replication').catch(() => '')
    if (known.every(Boolean) && replication.includes('master_link_status:up')) break
    if (Date.now() > deadline) throw new Error('the sentinels did not find each other and the replica within 15 s')
    await sleep(200)
  }
  return {
    kind: 'sentinel',
    env: {
      REDIS_SENTINELS: sentinels.map((s) => `127.0.0.1:${s.port}`).join(','),
      REDIS_SENTINEL_NAME: SENTINEL_NAME,
    },
    servers,
    sentinels,
    cli,
    masters,
    async flushAll() {
      const [address] = await masters()
      await cli(Number(address!.split(':')[1]), 'flushall')
    },
  }
}

/** The cluster's masters and their slot ranges, from a node that answers. */
async function clusterMasters(servers: OwnProcess[]): Promise<string[]> {
  for (const server of servers) {
    if (!server.running()) continue
    const nodes = await cli(server.port, 'cluster', 'nodes').catch(() => '')
    if (nodes === '') continue
    return nodes
      .split('\n')
      .map((line) => line.split(' '))
      .filter((f) => f[2]!.includes('master') && !f[2]!.includes('fail') && f.length > 8)
      .map((f) => f[1]!.split('@')[0]!)
      .sort()
  }
  return []
}

/** Three masters with a replica each (`redis-cli --cluster create --cluster-replicas 1`). */
export async function startCluster(t: TestLike, { failoverAfterMs = 1_000 }: TopologyOptions = {}): Promise<Topology> {
  const dir = tempDir(t, 'cluster')
  const servers: OwnProcess[] = []
  for (let i = 0; i < 6; i++)
    servers.push(
      await launch(t, dir, '/usr/bin/redis-server', (port) => [
        '--port',
        String(port),
        ...NO_DISK,
        ...SYNC_AT_ONCE,
        '--cluster-enabled',
        'yes',
        '--cluster-config-file',
        join(dir, `nodes-${port}.conf`),
        // A master that stops answering is failed over ~2 s later (by default).
        '--cluster-node-timeout',
        String(failoverAfterMs),
      ]),
    )
  await run(
    '/usr/bin/redis-cli',
    ['--cluster', 'create', ...servers.map((s) => `127.0.0.1:${s.port}`), '--cluster-replicas', '1', '--cluster-yes'],
    { timeout: 30_000 },
  )
  const deadline = Date.now() + 20_000
  for (;;) {
    const states = await Promise.all(servers.map((s) => cli(s.port, 'cluster', 'info').catch(() => '')))
    const masters = await clusterMasters(servers)
    // A replica can take over only once it has synced with its master.
    const replication = await Promise.all(servers.map((s) => cli(s.port, 'info', 'replication').catch(() => '')))
    const synced = replication.filter((info) => info.includes('master_link_status:up')).length === 3
    if (states.every((info) => info.includes('cluster_state:ok')) && masters.length === 3 && synced) break
    if (Date.now() > deadline) throw new Error('the cluster did not reach cluster_state:ok within 20 s')
    await sleep(200)
  }
  return {
    kind: 'cluster',
    env: { REDIS_CLUSTER_NODES: servers.map((s) => `127.0.0.1:${s.port}`).join(',') },
    servers,
    sentinels: [],
    cli,
    masters: () => clusterMasters(servers),
    async flushAll() {
      for (const address of await clusterMasters(servers)) await cli(Number(address.split(':')[1]), 'flushall')
    },
  }
}

export function startTopology(t: TestLike, kind: TopologyKind, options: TopologyOptions = {}): Promise<Topology> {
  if (kind === 'sentinel') return startSentinel(t, options)
  if (kind === 'cluster') return startCluster(t, options)
  return startServer(t)
}

/** The server behind host:port. */
export function serverAt(topology: Topology, address: string): OwnProcess {
  const port = Number(address.split(':')[1])
  const server = topology.servers.find((s) => s.port === port)
  if (server === undefined) throw new Error(`no server of the test's on ${address}`)
  return server
}

/** An answer to PING later than this is a server that could not run (or a network that held it). */
const PING_LATE_MS = 50

/**
 * Time the topology's running servers could not answer: a loaded machine starves them as it does
 * the test's own process, and that time is not the gateway's. Each is PINGed every 10 ms; what an
 * answer took past PING_LATE_MS counts as lost, and so does a PING still out. The most any one
 * server lost, until stopped (which closes its clients).
 */
export function serverStalls(topology: Topology): { lostMs(): number; stop(): void } {
  let running = true
  const probes = topology.servers
    .filter((server) => server.running() && !server.paused())
    .map((server) => {
      const client = new Redis(server.port, '127.0.0.1', { maxRetriesPerRequest: 1 })
      client.on('error', () => {})
      const probe = { lost: 0, sentAt: 0, client }
      void (async () => {
        // The first answer also waits for the connection, which is the probe's, not the server's.
        await client.ping().catch(() => {})
        while (running) {
          probe.sentAt = performance.now()
          await probe.client.ping().catch(() => {})
          const took = performance.now() - probe.sentAt
          probe.sentAt = 0
          if (took > PING_LATE_MS) probe.lost += took - PING_LATE_MS
          await sleep(10)
        }
      })()
      return probe
    })
  const outstanding = (sentAt: number) => (sentAt === 0 ? 0 : Math.max(0, performance.now() - sentAt - PING_LATE_MS))
  return {
    lostMs: () => Math.round(Math.max(0, ...probes.map((p) => p.lost + outstanding(p.sentAt)))),
    stop: () => {
      running = false
      for (const probe of probes) probe.client.disconnect()
    },
  }
}

/** A plain client of one node, for assertions. */
export function nodeClient(t: TestLike, port: number): Redis {
  const client = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1, lazyConnect: false })
  client.on('error', () => {})
  t.teardown(() => client.disconnect())
  return client
}
