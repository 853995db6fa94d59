// A redis-server of the bench's own (no disk), which it may flush, kill and start again empty on
// the same port: the machine's shared Redis is never disturbed (bench:limits-accuracy's losses).
import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { Redis } from '../src/cache/ioredis.js'
import { freePorts, sleep } from './lib.js'

export interface OwnRedis {
  url: string
  flushdb(): Promise<void>
  /** SIGKILL, as in a crash, then started again, empty; resolves once it answers. */
  restart(): Promise<void>
  stop(): Promise<void>
}

export async function startOwnRedis(): Promise<OwnRedis> {
  const [port] = (await freePorts(1)) as [number]
  const url = `redis://127.0.0.1:${port}`
  let child: ChildProcess
  const start = async () => {
    child = spawn('redis-server', ['--port', String(port), '--save', '', '--appendonly', 'no'], { stdio: 'ignore' })
    const probe = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
    probe.on('error', () => {})
    for (let i = 0; ; i++) {
      try {
        await probe.connect()
        await probe.ping()
        break
      } catch (err) {
        if (i > 200) throw err
        probe.disconnect()
        await sleep(10)
      }
    }
    probe.disconnect()
  }
  const kill = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return
    const exited = once(child, 'exit')
    child.kill('SIGKILL')
    await exited
  }
  await start()
  return {
    url,
    async flushdb() {
      const admin = new Redis(url)
      await admin.flushdb()
      admin.disconnect()
    },
    async restart() {
      await kill()
      await start()
    },
    stop: kill,
  }
}
