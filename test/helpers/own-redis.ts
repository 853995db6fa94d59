// A redis-server of the test's own, which it may kill, shut down and start again on the same port,
// so that the machine's shared Redis is never disturbed.
import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { connect } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { sleep } from './poll.js'
import type { TestLike } from './test-like.js'
import { stablePort } from './ports.js'

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
  /** SIGSTOP: it stops answering, its sockets open (what was written to it runs once resumed). */
  pause(): void
  /** SIGCONT after `pause`. */
  resume(): void
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
      [
        '--port',
        String(onPort),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
        '--dir',
        dir,
        '--loglevel',
        'warning',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    )
    proc.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
    watchOver(proc.pid!)
    let gone = false
    exited = new Promise<void>((resolve) =>
      proc.once('exit', () => {
        gone = true
        resolve()
      }),
    )
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
    pause() {
      if (running()) child!.kill('SIGSTOP')
    },
    resume() {
      if (running()) child!.kill('SIGCONT')
    },
  }
}
