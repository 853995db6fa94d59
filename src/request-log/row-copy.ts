// The request log's rows as one binary COPY (copy-format.ts) a batch, on a connection the writer
// owns. Postgres then stores each value as sent, with no JSON or array text to parse: about a
// third of the database's CPU a record (bench/README.md, the request log).
//
// Why a connection of its own: postgres.js 3.4.9's COPY is not safe on a shared pool. It
// pipelines other queries onto a connection whose COPY is under way, and Postgres then ends that
// connection (the management requests on it fail); and it tells a COPY's failure only to where
// the caller does not look (copyInto below). Here nothing else is ever sent on the connection, and
// a COPY that fails or outlasts its time ends the connection for good: the next batch opens a new
// one (test/faults/request-log-copy.test.ts).
import { setImmediate as nextTurn } from 'node:timers/promises'
import { type Sql, withDeadline } from '../store/db.js'
import { CopyBuffer } from './copy-format.js'
import { encodeRow, ROW_COLUMNS } from './row-forms.js'
import type { RowBuilder } from './rows.js'

/** About what a record takes in the COPY: its ids, path and address, with every length. */
const COPY_BYTES_A_RECORD = 200
/** A batch's memory larger than this (long paths) is not kept for the next. */
const MAX_SPARE_BYTES = 4 * 1024 * 1024

/**
 * How long a batch's COPY may run on the server (its connection's `statement_timeout`): a few
 * thousand records take milliseconds. A COPY waiting on a lock past it is ended by Postgres,
 * which frees its backend and commits nothing, so that a retry cannot write its batch twice.
 */
export const DEFAULT_COPY_TIMEOUT_MS = 15_000

export class RowCopy {
  private connection: Sql | null = null
  private closed = false
  private spare: CopyBuffer | null = null

  /**
   * `openConnection`: a client of one connection with these startup parameters (store/db.ts,
   * openOwnConnection). `recordsATurn`: records encoded between two turns of the event loop
   * (writer.ts). `timeoutMs`: the server's limit; the writer's own, for a server that no longer
   * answers at all (a network partition), is twice as long.
   */
  private readonly openConnection: (parameters: Record<string, string>) => Sql
  private readonly recordsATurn: number
  private readonly timeoutMs
  constructor(
    openConnection: (parameters: Record<string, string>) => Sql,
    recordsATurn: number,
    timeoutMs = DEFAULT_COPY_TIMEOUT_MS,
  ) {
    this.openConnection = openConnection
    this.recordsATurn = recordsATurn
    this.timeoutMs = timeoutMs
  }

  async copy(rows: readonly RowBuilder[]): Promise<void> {
    // The last batch's memory, once its COPY is done with it (a failed one may still be sending it).
    const out = this.spare ?? new CopyBuffer(COPY_BYTES_A_RECORD * rows.reduce((sum, row) => sum + row.size, 0) + 4096)
    this.spare = null
    out.reset()
    let sinceTurn = 0
    for (const row of rows) {
      encodeRow(row, out)
      sinceTurn += row.size
      if (sinceTurn >= this.recordsATurn) {
        sinceTurn = 0
        await nextTurn()
      }
    }
    const bytes = out.finish()
    // A write the app's close gave up waiting for may go on afterwards: it opens nothing new.
    if (this.closed) throw new Error('the request log is closed')
    this.connection ??= this.openConnection({ statement_timeout: String(this.timeoutMs) })
    try {
      await withDeadline(copyInto(this.connection, bytes), 2 * this.timeoutMs)
      if (out.capacity <= MAX_SPARE_BYTES) this.spare = out
    } catch (err) {
      // Whatever state the connection was left in, it is not used again.
      void this.endConnection()
      throw err
    }
  }

  /** Ends the connection, and whatever is under way on it; the next copy opens a new one. */
  private endConnection(): Promise<void> {
    const connection = this.connection
    this.connection = null
    return connection === null ? Promise.resolve() : connection.end({ timeout: 0 }).catch(() => {})
  }

  /** Ends the connection for good. */
  close(): Promise<void> {
    this.closed = true
    return this.endConnection()
  }
}

/**
 * Held by a replica's COPY from before its rows take their seqs until they are committed: replicas
 * write one at a time. Two COPYs at once interleave their seqs and commit in either order, so a
 * row could appear after a newer one, below where a reader walking newest first already was: a
 * page's cursor, or a client that stops at the last record it saw, would never see it.
 */
export const WRITE_LOCK = 7_346_120_021

async function copyInto(sql: Sql, bytes: Buffer): Promise<void> {
  // A lock of the session (the connection is the writer's alone): a COPY commits as it ends. A
  // failed one ends the connection (RowCopy.copy), and the lock with it.
  await sql`select pg_advisory_lock(${WRITE_LOCK})`
  await copyStream(sql, bytes)
  await sql`select pg_advisory_unlock(${WRITE_LOCK})`
}

async function copyStream(sql: Sql, bytes: Buffer): Promise<void> {
  const query = sql`copy request_log_rows (${sql.unsafe(ROW_COLUMNS)}) from stdin with (format binary)`
  // postgres.js 3.4.9 tells the end of a COPY under way, whether the server refused its rows or
  // the connection was lost, only to its query, whose promise has already given the stream: the
  // stream itself never finishes (porsager/postgres#1173). Its reject is where it says so.
  const failed = new Promise<never>((_, reject) => {
    const internal = query as unknown as { reject: (err: unknown) => void }
    const rejectQuery = internal.reject
    internal.reject = (err) => {
      reject(err)
      rejectQuery(err)
    }
  })
  failed.catch(() => {}) // heard through the race below, or not at all once the COPY is done
  const stream = await query.writable()
  const finished = new Promise<void>((resolve, reject) => {
    stream.on('error', reject)
    stream.on('finish', resolve)
    stream.end(bytes)
  })
  await Promise.race([finished, failed])
}
