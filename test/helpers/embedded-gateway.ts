// The gateway started as the README says (`npm start`, no DATABASE_URL: the embedded database in
// DATA_DIR), in a process group of its own so that npm, sh and node are stopped together.
import { spawn, type ChildProcess } from 'node:child_process'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import type { TestLike } from './test-like.js'
import { closedPort } from './upstream.js'

const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url))
const START_TIMEOUT = 60_000

/** The first start's line: the bootstrap parent's id and its key. */
export const BOOTSTRAP_LINE =
  /^bootstrap parent account ([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}) key (tgw_[0-9A-Za-z]{49})$/

/** The test's environment without the variables that would leave embedded mode. */
export function embeddedEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, ...extra }
  delete env.DATABASE_URL
  delete env.REDIS_URL
  delete env.UPSTREAM_URL
  return env
}

/** True while any process of the group led by `pgid` is alive. */
function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0)
    return true
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'
  }
}

export interface EmbeddedGateway {
  child: ChildProcess
  port: number
  base: string
  stdout(): string
  stderr(): string
  /** The exit code once the process (npm) has exited: a start that fails exits 1. */
  exited(): Promise<number | null>
  waitForStdout(pattern: RegExp, what: string): Promise<RegExpMatchArray>
  waitListening(): Promise<void>
  stop(): Promise<void>
}

export interface EmbeddedOptions {
  /** PORT; a free one by default. */
  port?: number
  /** METRICS_PORT; a free one by default. */
  metricsPort?: number
  /** More variables (LOG_LEVEL is info unless given). */
  env?: Record<string, string>
}

/** `npm start` on `dataDir`; whatever happens, the process group is killed at `t`'s teardown. */
export async function startEmbeddedGateway(
  t: TestLike,
  dataDir: string,
  options: EmbeddedOptions = {},
): Promise<EmbeddedGateway> {
  const port = options.port ?? (await closedPort())
  const metricsPort = options.metricsPort ?? (await closedPort())
  const child = spawn('npm', ['start'], {
    cwd: REPO_ROOT,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: embeddedEnv({
      DATA_DIR: dataDir,
      PORT: String(port),
      HOST: '127.0.0.1',
      LOG_LEVEL: 'info',
      METRICS_PORT: String(metricsPort),
      ...options.env,
    }),
  })
  const pgid = child.pid!
  t.teardown(() => {
    if (groupAlive(pgid)) process.kill(-pgid, 'SIGKILL')
  })
  let out = ''
  let err = ''
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (out += chunk))
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (err += chunk))
  let exited = false
  const exit = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => {
      exited = true
      resolve(code)
    }),
  )

  async function waitForStdout(pattern: RegExp, what: string): Promise<RegExpMatchArray> {
    const deadline = Date.now() + START_TIMEOUT
    for (;;) {
      const match = out
        .split('\n')
        .map((line) => pattern.exec(line))
        .find((m) => m !== null)
      if (match) return match
      if (exited) throw new Error(`the gateway exited before printing ${what}\nstdout: ${out}\nstderr: ${err}`)
      if (Date.now() > deadline)
        throw new Error(`no ${what} within ${START_TIMEOUT} ms\nstdout: ${out}\nstderr: ${err}`)
      await sleep(50)
    }
  }

  const base = `http://127.0.0.1:${port}`
  return {
    child,
    port,
    base,
    stdout: () => out,
    stderr: () => err,
    async exited() {
      const code = await exit
      // npm may exit before its grandchild (the node process that held the database) is gone.
      while (groupAlive(pgid)) await sleep(50)
      return code
    },
    waitForStdout,
    async waitListening() {
      await waitForStdout(/"msg":"Server listening at /, 'the "Server listening" log line')
      // And it answers: any HTTP response (401 without a key) will do.
      const res = await fetch(`${base}/v1/sub-accounts`)
      await res.arrayBuffer()
      if (res.status !== 401) throw new Error(`expected 401 without a key, got ${res.status}`)
    },
    async stop() {
      if (groupAlive(pgid)) process.kill(-pgid, 'SIGTERM')
      await exit
      const deadline = Date.now() + 30_000
      while (groupAlive(pgid)) {
        if (Date.now() > deadline) {
          process.kill(-pgid, 'SIGKILL')
          throw new Error(`the gateway did not stop within 30 s of SIGTERM\nstdout: ${out}\nstderr: ${err}`)
        }
        await sleep(50)
      }
    },
  }
}
