// The connection to Postgres: a real server when DATABASE_URL is set, else the embedded PGlite
// database in DATA_DIR, served to the same postgres.js code over a loopback socket (docs/configuration.md).
import { randomBytes } from 'node:crypto'
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import postgres from 'postgres'
import { processIsAlive } from '../shared/process-alive.js'

export type Sql = postgres.Sql
export type Tx = postgres.TransactionSql

export interface Store {
  readonly sql: Sql
  /** True for the embedded PGlite database (one process, one connection). */
  readonly embedded: boolean
  /**
   * A real Postgres pool: its size, and this process's application_name, unique per process so
   * that its connections can be told apart in pg_stat_activity (the pool-use metric).
   */
  readonly pool?: { readonly max: number; readonly applicationName: string }
  /**
   * Connections of their own for the paths no management call may hold up: the tenancy lookups
   * (a key's first request), the limits' month rebuild and /readyz. LOOKUP_CONNECTIONS of them,
   * named `<application_name> lookups`. The embedded database's one connection otherwise.
   */
  readonly lookupSql?: Sql
  /**
   * The heavy reads' own connections (management/heavy-reads.ts): reconciliation, the export's
   * pull, usage reports, the request log's reads, the simulator's. HEAVY_READ_CONNECTIONS of them,
   * named `<application_name> reads`; the management API reads through it cancellable
   * (store/call-statements.ts), so that a call answered 503 stops its statements. However many heavy reads come, the pool's connections stay
   * for the other calls and the background work.
   */
  readonly heavyReadSql?: Sql
  /**
   * A client of one connection of its own, for work that must not share the pool's connections:
   * the request log's binary COPY (request-log/row-copy.ts). None for the embedded database,
   * which has one connection in all. The caller ends it.
   */
  readonly openOwnConnection?: (parameters?: Record<string, string>) => Sql
  close(): Promise<void>
}

export class QueryTimeoutError extends Error {
  /** Read by the error handler: the store did not answer in time, so the answer is 503. */
  readonly code = 'QUERY_TIMEOUT'
  constructor(timeoutMs: number) {
    super(`the query did not finish within ${timeoutMs} ms`)
    this.name = 'QueryTimeoutError'
  }
}

/**
 * The query's result, or a QueryTimeoutError after `timeoutMs`. The query itself is left to end
 * on its own (the connection's timeouts end it): cancelling it would open one more connection to
 * a store that is not answering, whose failure postgres.js reports to no one.
 *
 * The deadline waits one more turn of the event loop before it fails the query: after the loop
 * was blocked (a long GC pause, a burst of CPU work), Node runs expired timers before it reads
 * the sockets, so an answer already waiting would otherwise be thrown away as late, and the
 * lookup's failure would make the cache skip Postgres for a second of 503s (bench/RESULTS.md at e5da086, R7).
 */
export async function withDeadline<T>(query: PromiseLike<T>, timeoutMs: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  let afterPoll: NodeJS.Immediate | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      afterPoll = setImmediate(() => reject(new QueryTimeoutError(timeoutMs)))
    }, timeoutMs)
  })
  try {
    return await Promise.race([query, timeout])
  } finally {
    clearTimeout(timer)
    clearImmediate(afterPoll)
  }
}

export interface StoreOptions {
  databaseUrl: string | undefined
  dataDir: string
  /** Pool size for a real Postgres. The embedded database always uses one connection. */
  maxConnections?: number
  /** Who holds the embedded database, written into its lock file. */
  holder?: string
  /**
   * The pool's `statement_timeout` and `lock_timeout` (default MAIN_STATEMENT_TIMEOUT_MS): no
   * longer than a management call's store deadline. The embedded database has none.
   */
  statementTimeoutMs?: number
}

export class EmbeddedDatabaseBusyError extends Error {
  constructor(dataDir: string, holder: string) {
    super(`the embedded database in ${dataDir} is in use by ${holder}; stop it or set DATABASE_URL`)
    this.name = 'EmbeddedDatabaseBusyError'
  }
}

const COMMON_OPTIONS = {
  onnotice: () => {},
  // Connection-level timeouts, so that an unreachable database fails a request instead of hanging it.
  connect_timeout: 5,
  idle_timeout: 60,
  // No array-type query on each new connection: postgres.js 3.4.9 drops that query's promise, so
  // a connection lost during it is an unhandled rejection (test/faults/postgres-reset.test.ts).
  // Without it postgres.js neither parses nor serialises arrays: they cross as JSON instead
  // (to_jsonb on the way out, jsonb_to_recordset and jsonb_array_elements_text on the way in).
  // Beware: with it off, postgres.js 3.4.9 never hands a new connection to sql.reserve() (it
  // hangs); the gateway does not use reserve().
  fetch_types: false,
} as const

/**
 * The main pool's `statement_timeout` and `lock_timeout`, in ms: a management call's store deadline
 * (store/deadlines.ts, STORE_DEADLINES.managementMs, is this one), so that no statement of a call, the portal's, the token endpoint's or a
 * background job's outlives the call it serves, and a job's statement blocked by a lock ends
 * (Postgres cancels it: 57014 or 55P03) and is tried again at the job's next turn. A call answered
 * 503 earlier has its statements cancelled at once (store/call-statements.ts). The work that may
 * take longer sets its own, in its transaction: the migrations none (store/migrate.ts).
 */
export const MAIN_STATEMENT_TIMEOUT_MS = 1_500
/**
 * The main pool's `idle_in_transaction_session_timeout`: a transaction left open by work that no
 * longer runs (its process stalled, its promise lost) gives its locks and connection back. Far
 * above any transaction's own pauses, which are between statements of one piece of work.
 */
export const IDLE_IN_TRANSACTION_TIMEOUT_MS = 30_000

/**
 * Lifts the pool's `statement_timeout` and `lock_timeout` for the rest of transaction `tx` (SET
 * LOCAL), for work that may rightly run long and must end with its own outcome, never a timeout:
 * the migrations (a deploy fails on their error, not on their length), a one-time conversion.
 */
export async function withoutTimeouts(tx: Tx): Promise<void> {
  await tx.unsafe('set local statement_timeout = 0; set local lock_timeout = 0')
}

/** A replica's connections for the tenancy lookups, the limits' rebuild and /readyz (Store.lookupSql). */
export const LOOKUP_CONNECTIONS = 4
/** A replica's connections for the heavy reads (Store.heavyReadSql). */
export const HEAVY_READ_CONNECTIONS = 4
/**
 * The heavy reads' connections' `statement_timeout`, should a cancel not reach Postgres: the
 * longest call deadline (a limit simulation's, store/deadlines.ts). A call's statements are
 * cancelled at its own deadline (store/call-statements.ts); the request log's set theirs lower.
 */
export const HEAVY_READ_STATEMENT_TIMEOUT_MS = 60_000

export async function openStore(options: StoreOptions): Promise<Store> {
  if (options.databaseUrl !== undefined) {
    const { databaseUrl } = options
    const max = options.maxConnections ?? 10
    const applicationName = `tenancy-gateway ${randomBytes(4).toString('hex')}`
    // Every query here is a point lookup or a page: a parallel worker costs more to start than
    // the query takes (about 10 ms a usage page instead of 0.7 at 100,000 sub-accounts). Strings:
    // postgres.js drops falsy startup parameters. See bench/README.md. Prepared statements keep
    // Postgres's default plan cache: planning each write's statement cost more than running it
    // (300-550 µs against 300); the usage reads whose plan depends on their range are planned
    // each time instead (store/statement.ts runPlannedEachTime).
    const pool = (size: number, name: string, parameters: Record<string, string> = {}) =>
      postgres(databaseUrl, {
        ...COMMON_OPTIONS,
        max: size,
        connection: { ...parameters, application_name: name, max_parallel_workers_per_gather: '0' },
      })
    const timeout = String(options.statementTimeoutMs ?? MAIN_STATEMENT_TIMEOUT_MS)
    const sql = pool(max, applicationName, {
      statement_timeout: timeout,
      lock_timeout: timeout,
      idle_in_transaction_session_timeout: String(IDLE_IN_TRANSACTION_TIMEOUT_MS),
    })
    // Pools of their own, opened as they are first used (docs/operations.md, connections).
    const lookupSql = pool(LOOKUP_CONNECTIONS, `${applicationName} lookups`)
    const heavyReadSql = pool(HEAVY_READ_CONNECTIONS, `${applicationName} reads`, {
      statement_timeout: String(HEAVY_READ_STATEMENT_TIMEOUT_MS),
    })
    return {
      sql,
      lookupSql,
      heavyReadSql,
      embedded: false,
      pool: { max, applicationName },
      // Named apart from the pool, whose use is counted by its name (store/activity.ts).
      openOwnConnection: (parameters) => openOneConnection(databaseUrl, `${applicationName} own`, parameters),
      close: async () => {
        await Promise.all([sql, lookupSql, heavyReadSql].map((each) => each.end({ timeout: 5 })))
      },
    }
  }
  return openEmbeddedStore(options.dataDir, options.holder ?? `process ${process.pid}`)
}

/**
 * A client of one connection to a real Postgres, apart from any pool (Store.openOwnConnection);
 * `parameters` are set at its startup (`statement_timeout`, say).
 */
export function openOneConnection(
  databaseUrl: string,
  applicationName: string,
  parameters: Record<string, string> = {},
): Sql {
  return postgres(databaseUrl, {
    ...COMMON_OPTIONS,
    max: 1,
    connection: { ...parameters, application_name: applicationName },
  })
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

async function openEmbeddedStore(dataDir: string, holder: string): Promise<Store> {
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

/**
 * True once one of the pool's connections has completed its startup with Postgres since the
 * process started: postgres.js keeps the parameters the server reports then (server_version
 * among them) for the pool's lifetime, whatever happens to the connection afterwards.
 */
export function hasReachedPostgres(sql: Sql): boolean {
  return sql.parameters.server_version !== undefined
}

/** How long a start waits for its first answer from a real Postgres (docs/operations.md). */
export const FIRST_CONTACT_TIMEOUT_MS = 10_000

/** Where a connection string points, for messages: host:port/database, never the password. */
export function describeDatabaseUrl(databaseUrl: string): string {
  const url = new URL(databaseUrl)
  return `${url.hostname || 'localhost'}:${url.port || '5432'}${url.pathname.length > 1 ? url.pathname : ''}`
}

/**
 * Waits for a real Postgres's first answer, and fails with a message that names Postgres,
 * DATABASE_URL and where it was tried. postgres.js retries a host that does not answer without
 * end (each attempt ends at connect_timeout, and the next begins), so a start would otherwise hang
 * in silence. On failure the pool is ended at once: nothing was sent that is worth waiting for.
 */
export async function reachPostgres(
  sql: Sql,
  databaseUrl: string,
  timeoutMs = FIRST_CONTACT_TIMEOUT_MS,
): Promise<void> {
  try {
    await withDeadline(sql`select 1`, timeoutMs)
  } catch (err) {
    await sql.end({ timeout: 0 })
    const code = (err as { code?: unknown }).code
    const where = describeDatabaseUrl(databaseUrl)
    // Postgres answered: the address is right, and the message says what else is wrong.
    if (code === '3D000') {
      // The one postgres.js asked for (with no path in the URL: the user's name, or PGDATABASE).
      const name = String(sql.options.database)
      throw new Error(
        `Postgres at ${where} answers but has no database "${name}" (DATABASE_URL): create it (createdb ${name}) or name one that exists`,
      )
    }
    if (code === '28P01' || code === '28000')
      throw new Error(
        `Postgres at ${where} answers but refuses the user or password of DATABASE_URL: ${(err as Error).message}`,
      )
    const why =
      err instanceof QueryTimeoutError
        ? `no answer within ${timeoutMs / 1000} s`
        : code === 'CONNECT_TIMEOUT'
          ? `no answer within ${COMMON_OPTIONS.connect_timeout} s (the connection's timeout)`
          : (err as Error).message
    throw new Error(`cannot reach Postgres at ${where} (DATABASE_URL): ${why}`)
  }
}
