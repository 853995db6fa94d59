// Where and how long the usage meter's writes run (meter.ts): on a connection of the meter's own,
// under a deadline that ends that connection, so that a Postgres that stops answering (a lock, a
// primary gone without a reset) fails a write instead of holding it, and a stop's writes end by
// the stop's own bound.
import { QueryTimeoutError, type Sql, withDeadline } from '../store/db.js'

/**
 * How long Postgres may run one of the meter's writes (its connection's `statement_timeout` and
 * `lock_timeout`): a flush takes milliseconds; one that waits on a lock past this is cancelled by
 * Postgres, which commits nothing of it.
 */
export const WRITE_TIMEOUT_MS = 3_000
/**
 * How much longer the meter waits for an answer before it ends the connection (a server that no
 * longer answers at all): the flush fails, its batch is in doubt, the next write opens a new one.
 */
const WRITE_ANSWER_MARGIN_MS = 1_000
/**
 * How long a stop may spend on the last writes, the one under way included (docs/operations.md,
 * Graceful shutdown): well inside the 10 s the process is given after its requests have finished.
 */
export const CLOSE_TIMEOUT_MS = 6_000

/** How the meter's writes reach Postgres (MeterOptions: the same fields). */
export interface MeterWritesOptions {
  sql: Sql
  openConnection?: ((parameters: Record<string, string>) => Sql) | undefined
  writeTimeoutMs?: number | undefined
}

export class MeterWrites {
  /** The meter's own connection (MeterOptions.openConnection), opened at its first write. */
  private connection: Sql | null = null
  /** While the meter's close() runs: when (performance.now()) its writes must be over. */
  stopBy: number | null = null
  private readonly options: MeterWritesOptions
  constructor(options: MeterWritesOptions) {
    this.options = options
  }

  /**
   * Runs one write under its deadline: on the meter's own connection, which any failure ends
   * (whatever state it was left in, a write in doubt must not wait behind a dead socket), or on
   * the pool (the embedded database). During close(), no later than its end.
   */
  async run<T>(write: (sql: Sql) => Promise<T>): Promise<T> {
    const writeTimeoutMs = this.options.writeTimeoutMs ?? WRITE_TIMEOUT_MS
    let timeoutMs = writeTimeoutMs + WRITE_ANSWER_MARGIN_MS
    if (this.stopBy !== null) timeoutMs = Math.min(timeoutMs, Math.floor(this.stopBy - performance.now()))
    if (timeoutMs <= 0) throw new QueryTimeoutError(0)
    const { openConnection } = this.options
    if (openConnection === undefined) return withDeadline(write(this.options.sql), timeoutMs)
    const timeout = String(writeTimeoutMs)
    this.connection ??= openConnection({ statement_timeout: timeout, lock_timeout: timeout })
    const connection = this.connection
    try {
      return await withDeadline(write(connection), timeoutMs)
    } catch (err) {
      if (this.connection === connection) void this.end()
      throw err
    }
  }

  /** Ends the meter's own connection, and whatever is under way on it; the next write opens another. */
  end(): Promise<void> {
    const connection = this.connection
    this.connection = null
    return connection === null ? Promise.resolve() : connection.end({ timeout: 0 }).catch(() => {})
  }
}
