// The connection to Postgres: a real server when DATABASE_URL is set, else the embedded PGlite
// database in DATA_DIR, served to the same postgres.js code over a loopback socket (docs/configuration.md).
// The embedded database is embedded-store.ts's; the first contact with a real Postgres, first-contact.ts's.
import { randomBytes } from 'node:crypto'
import postgres from 'postgres'
import { openEmbeddedStore } from './embedded-store.js'
import { COMMON_OPTIONS } from './postgres-options.js'

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
