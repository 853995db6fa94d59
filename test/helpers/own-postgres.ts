// A Postgres server of the test's own (initdb in a temporary directory, trust authentication, on
// a port of its own), which it may stop under traffic and start again on the same port with its
// data, so that the machine's shared Postgres is never disturbed. Postgres refuses to run as
// root: as root, the server runs as the `postgres` user.
import { execFile, spawn } from 'node:child_process'
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { tmpdir, userInfo } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { stablePort } from './ports.js'
import type { TestLike } from './test-like.js'

const run = promisify(execFile)

/** Debian's Postgres binaries: the newest version installed. */
function binDir(): string {
  const root = '/usr/lib/postgresql'
  const versions = existsSync(root) ? readdirSync(root).filter((v) => /^\d+$/.test(v)) : []
  if (versions.length === 0) throw new Error(`no Postgres under ${root}: apt-get install postgresql`)
  return join(root, versions.sort((a, b) => Number(b) - Number(a))[0]!, 'bin')
}

export interface OwnPostgres {
  port: number
  /** postgres://postgres@127.0.0.1:<port>/postgres */
  url: string
  /** `pg_ctl stop -m immediate`: the server goes at once, as in a crash. */
  stop(): Promise<void>
  /** Starts it again, with its data, on the same port. */
  start(): Promise<void>
}

export async function startPostgres(t: TestLike): Promise<OwnPostgres> {
  const bin = binDir()
  const dir = mkdtempSync(join(tmpdir(), 'tgw-own-postgres-'))
  const data = join(dir, 'data')
  const asRoot = userInfo().uid === 0
  // The server's user must own its directory; the socket goes there too.
  if (asRoot) {
    const { stdout } = await run('id', ['-u', 'postgres'])
    const uid = Number(stdout.trim())
    chownSync(dir, uid, uid)
  }
  chmodSync(dir, 0o700)
  const as = (command: string, args: string[]) =>
    asRoot ? run('runuser', ['-u', 'postgres', '--', join(bin, command), ...args]) : run(join(bin, command), args)
  await as('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8'])
  const port = await stablePort()
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50`
  let running = false
  const start = async () => {
    await as('pg_ctl', ['-D', data, '-o', options, '-w', '-t', '30', '-l', join(dir, 'log'), 'start'])
    running = true
  }
  const stop = async () => {
    if (!running) return
    running = false
    await as('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop'])
  }
  await start()
  // Should this process die without its teardown, the server stops with it.
  const watchdog = `while kill -0 ${process.pid} 2>/dev/null; do sleep 0.5; done; ${asRoot ? `runuser -u postgres -- ` : ''}${join(bin, 'pg_ctl')} -D ${data} -m immediate stop; rm -rf ${dir}`
  spawn('/bin/sh', ['-c', watchdog], { stdio: 'ignore', detached: true }).unref()
  t.teardown(async () => {
    await stop().catch(() => {})
    rmSync(dir, { recursive: true, force: true })
  })
  return { port, url: `postgres://postgres@127.0.0.1:${port}/postgres`, stop, start }
}
