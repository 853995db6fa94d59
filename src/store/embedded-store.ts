// The embedded database (docs/configuration.md): PGlite in DATA_DIR, one backend in this process,
// served over a loopback socket to the same postgres.js code as a real Postgres (store/db.ts), and
// kept to one process by a lock file.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import postgres from 'postgres'
import { processIsAlive } from '../shared/process-alive.js'
import { COMMON_OPTIONS } from './postgres-options.js'

export class EmbeddedDatabaseBusyError extends Error {
  constructor(dataDir: string, holder: string) {
    super(`the embedded database in ${dataDir} is in use by ${holder}; stop it or set DATABASE_URL`)
    this.name = 'EmbeddedDatabaseBusyError'
  }
}

/**
 * PGlite is a single backend inside one process: two processes on one data directory would
 * corrupt it. A lock file with our PID keeps a second one out; a lock left by a dead process is
 * taken over.
 */
function lockDataDir(dataDir: string, holder: string): () => void {
  mkdirSync(dataDir, { recursive: true })
  const lockPath = join(dataDir, 'gateway.lock')
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(lockPath, JSON.stringify({ pid: process.pid, holder }), { flag: 'wx' })
      return () => rmSync(lockPath, { force: true })
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
      let owner: { pid?: number; holder?: string } = {}
      try {
        owner = JSON.parse(readFileSync(lockPath, 'utf8'))
      } catch {
        // A half-written lock file: treated as stale below.
      }
      // Our own PID counts as busy too: a second PGlite on one directory in one process corrupts it.
      if (typeof owner.pid === 'number' && processIsAlive(owner.pid)) {
        throw new EmbeddedDatabaseBusyError(dataDir, `${owner.holder ?? 'another process'} (pid ${owner.pid})`)
      }
      rmSync(lockPath, { force: true })
    }
  }
  throw new EmbeddedDatabaseBusyError(dataDir, 'another process')
}

/** The embedded database as a Store (store/db.ts): one connection, closed with the database and its lock. */
export async function openEmbeddedStore(
  dataDir: string,
  holder: string,
): Promise<{ readonly sql: postgres.Sql; readonly embedded: true; close(): Promise<void> }> {
  const unlock = lockDataDir(dataDir, holder)
  try {
    // Loaded lazily: a deployment on a real Postgres never pays for the WebAssembly build.
    const { PGlite } = await import('@electric-sql/pglite')
    const { PGLiteSocketServer } = await import('@electric-sql/pglite-socket')
    const db = await PGlite.create(join(dataDir, 'pgdata'))
    // PGlite is one backend session: several pooled connections break as soon as transactions
    // and plain queries interleave, so both sides use exactly one connection.
    const server = new PGLiteSocketServer({ db, host: '127.0.0.1', port: 0, maxConnections: 1 })
    await server.start()
    const [host, port] = server.getServerConn().split(':')
    const sql = postgres({
      ...COMMON_OPTIONS,
      host,
      port: Number(port),
      user: 'postgres',
      database: 'postgres',
      max: 1,
      // Never let the one connection go idle-closed: the socket has a single slot and no
      // password, so a free slot could be taken by any local process.
      idle_timeout: 0,
      max_lifetime: null,
    })
    return {
      sql,
      embedded: true,
      close: async () => {
        try {
          await sql.end({ timeout: 5 })
          await server.stop()
          await db.close()
        } finally {
          unlock()
        }
      },
    }
  } catch (err) {
    unlock()
    throw err
  }
}
