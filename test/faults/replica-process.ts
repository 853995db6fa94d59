// A replica of the gateway in a process of its own (gateway-process.ts), to be killed: the fault
// tests whose replicas must die as a process does (SIGKILL: no close, no last flush).
import { type ChildProcess, spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import type { AppTuning } from '../../src/app-deps.js'
import type { TestLike } from '../helpers/test-like.js'
import { RUN_TYPESCRIPT } from '../helpers/typescript.js'

const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url))

export interface ReplicaProcess {
  url: string
  child: ChildProcess
  /** Whatever it wrote, for a failure's message. */
  output(): string
  /** SIGKILL, and its exit. */
  kill(): Promise<void>
  /** Closes its app as main.ts does on SIGTERM (its usage written), then its exit. */
  close(): Promise<void>
}

export async function startReplicaProcess(
  t: TestLike,
  options: {
    databaseUrl: string
    routes: readonly Record<string, unknown>[]
    /** More of the gateway's variables (FAULT_ENV): REDIS_URL, REDIS_KEY_PREFIX, usage periods… */
    env?: Record<string, string>
    /** Timings only (FAULT_TUNING: JSON). */
    tuning?: AppTuning
    /** More of node's own flags: the image's heap cap (`--max-old-space-size=160`, Dockerfile). */
    nodeFlags?: readonly string[]
  },
): Promise<ReplicaProcess> {
  const child = spawn(
    process.execPath,
    ['--expose-gc', ...(options.nodeFlags ?? []), ...RUN_TYPESCRIPT, 'test/faults/gateway-process.ts'],
    {
      cwd: REPO_ROOT,
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      env: {
        ...process.env,
        DATABASE_URL: options.databaseUrl,
        FAULT_ROUTES: JSON.stringify({ routes: options.routes }),
        FAULT_ENV: JSON.stringify(options.env ?? {}),
        FAULT_TUNING: JSON.stringify(options.tuning ?? {}),
      },
    },
  )
  let output = ''
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk))
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk))
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  const alive = () => child.exitCode === null && child.signalCode === null
  t.teardown(async () => {
    if (alive()) child.kill('SIGKILL')
    await exited
  })
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the gateway process did not start: ${output}`)), 60_000)
    child.once('exit', () => {
      clearTimeout(timer)
      reject(new Error(`the gateway process exited: ${output}`))
    })
    child.on('message', (message: { type: string; port?: number }) => {
      if (message.type !== 'listening') return
      clearTimeout(timer)
      resolve(message.port!)
    })
  })
  return {
    url: `http://127.0.0.1:${port}`,
    child,
    output: () => output,
    async kill() {
      if (alive()) child.kill('SIGKILL')
      await exited
    },
    async close() {
      if (alive()) child.send({ type: 'close' })
      await exited
    },
  }
}
