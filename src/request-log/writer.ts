// Writes the request log off the request path (docs/operations.md, the request log): records wait
// in a bounded buffer, made into their rows as they come (row-buffer.ts, rows.ts), and go to
// Postgres a batch of rows at a time, as one binary COPY on a connection of the writer's own
// (row-copy.ts), or one JSON INSERT to the embedded database. A write that fails puts its batch
// back and is tried again after a pause that doubles up to 5 s; meanwhile the buffer keeps the
// newest records and counts the ones it drops.
import type { FastifyBaseLogger } from 'fastify'
import { type Sql, withDeadline } from '../store/db.js'
import { dayOfRecord, ensurePartition } from './partitions.js'
import type { RequestRecord } from './capture.js'
import { RowBuffer } from './row-buffer.js'
import { RowCopy } from './row-copy.js'
import { ROW_COLUMNS, rowText } from './row-forms.js'
import type { RowBuilder } from './rows.js'
import { ensureRequestLogTable, ROW_RECORDS } from './schema.js'

export const DEFAULT_BUFFER_RECORDS = 100_000
export const DEFAULT_BATCH_RECORDS = 5_000
/**
 * The most characters of paths one batch takes (about 4 MB): a batch of 5,000 records of 16 KiB
 * paths, with its COPY's bytes beside it, would take most of a replica's heap.
 */
export const DEFAULT_BATCH_PATH_CHARS = 4 * 1024 * 1024
/** A second: at a parent's few requests a second, the longer the wait, the fuller its rows (schema.ts). */
export const DEFAULT_FLUSH_INTERVAL_MS = 1_000
const MAX_RETRY_PAUSE_MS = 5_000
/**
 * Records encoded between two turns of the event loop (row-copy.ts): a batch's 5,000 at once held
 * it for milliseconds, which the requests in flight then waited (the p99 at one connection).
 */
const RECORDS_A_TURN = 500
/** How long the app's close waits for the last writes: a Postgres that stopped answering must not hold it. */
const CLOSE_WAIT_MS = 5_000

export interface WriterOptions {
  sql: Sql
  log: FastifyBaseLogger
  bufferRecords?: number
  batchRecords?: number
  flushIntervalMs?: number
  /** Records a row at most (schema.ts, ROW_RECORDS); tests make it small to write many rows. */
  rowRecords?: number
  /**
   * Opens a client of one connection of the writer's own (store/db.ts, openOwnConnection): rows
   * then go as a binary COPY on it (row-copy.ts). Without it, as one JSON parameter on `sql`: the
   * embedded PGlite, which has one connection and takes no COPY from a client.
   */
  openCopyConnection?: (parameters: Record<string, string>) => Sql
  /** How long a COPY may run before it is ended and its batch retried (row-copy.ts). */
  copyTimeoutMs?: number
  /** Told of what each write did: records written, or a failure. */
  onWritten?: (records: number) => void
  onWriteFailed?: () => void
}

export class RequestLogWriter {
  readonly buffer: RowBuffer
  private readonly batchRecords: number
  private readonly flushIntervalMs: number
  private readonly rowCopy: RowCopy | null
  private timer: NodeJS.Timeout | null = null
  private writing: Promise<void> | null = null
  /** Days whose partition is known to exist. */
  private readonly readyDays = new Set<number>()
  /** Days of records added whose partition is not known to exist yet. */
  private readonly pendingDays = new Set<number>()
  /** The day of the last record added: the days are looked up only when it changes. */
  private lastDay = -1
  /** The table is made at start (plugin.ts); should that have failed, before the first write. */
  tableReady = false
  private retryPause = 0
  private retryAt = 0
  private closed = false

  private readonly options: WriterOptions
  constructor(options: WriterOptions) {
    this.options = options
    this.buffer = new RowBuffer(options.bufferRecords ?? DEFAULT_BUFFER_RECORDS, options.rowRecords ?? ROW_RECORDS)
    this.batchRecords = options.batchRecords ?? DEFAULT_BATCH_RECORDS
    this.flushIntervalMs = options.flushIntervalMs ?? DEFAULT_FLUSH_INTERVAL_MS
    this.rowCopy =
      options.openCopyConnection === undefined
        ? null
        : new RowCopy(options.openCopyConnection, RECORDS_A_TURN, options.copyTimeoutMs)
  }

  start(): void {
    if (this.timer !== null) return
    // A write still under way at the next tick: what came since waits for the tick after it.
    this.timer = setInterval(() => {
      if (this.writing === null) void this.writeBuffered()
    }, this.flushIntervalMs)
    this.timer.unref()
  }

  add(record: RequestRecord): void {
    if (this.closed) return
    const day = dayOfRecord(record.timeMs)
    if (day !== this.lastDay) {
      this.lastDay = day
      if (!this.readyDays.has(day)) this.pendingDays.add(day)
    }
    this.buffer.add(record, day)
    // A batch's worth waits for no tick: under heavy traffic the records go out young, before
    // the collector would have to move them to the old generation.
    if (this.buffer.size >= this.batchRecords && this.writing === null && this.timer !== null) void this.writeBuffered()
  }

  /** Records added and not written yet (a failed write keeps its records for a retry). */
  get pending(): number {
    return this.buffer.size
  }

  /**
   * Writes what is buffered now, a batch at a time; after the write under way, if one is (it took
   * only what was buffered when it began). Never throws.
   */
  flush(): Promise<void> {
    if (this.writing === null) return this.writeBuffered()
    return this.writing.then(() => this.writing ?? this.writeBuffered())
  }

  private writeBuffered(): Promise<void> {
    if (this.buffer.size === 0 || Date.now() < this.retryAt) return Promise.resolve()
    this.writing = this.writeAll().finally(() => {
      this.writing = null
    })
    return this.writing
  }

  /**
   * The records buffered when it began, and no more: a write that went on while requests kept
   * coming would never end, and under steady traffic the log wrote one small COPY after another
   * (every 90 ms, rows of a tenth of a second), rather than full rows once a second.
   */
  private async writeAll(): Promise<void> {
    let left = this.buffer.size
    while (left > 0 && this.buffer.size > 0) {
      const batch = this.buffer.take(this.batchRecords, DEFAULT_BATCH_PATH_CHARS)
      const records = batch.reduce((sum, row) => sum + row.size, 0)
      left -= records
      try {
        await this.write(batch)
        this.retryPause = 0
        this.options.onWritten?.(records)
      } catch (err) {
        this.buffer.putBack(batch)
        // Its days' partitions are looked at again before the retry: another replica's retention
        // sweep may have dropped a day this one still holds records of (a request that began on
        // it), which no partition would then take, ever. Made again, the next sweep drops it.
        for (const { day } of batch) {
          this.readyDays.delete(day)
          this.pendingDays.add(day)
        }
        this.retryPause = Math.min(MAX_RETRY_PAUSE_MS, Math.max(this.flushIntervalMs, this.retryPause * 2))
        this.retryAt = Date.now() + this.retryPause
        this.options.onWriteFailed?.()
        this.options.log.warn({ err, buffered: this.buffer.size }, 'request log: write failed, will retry')
        return
      }
    }
  }

  private async write(rows: readonly RowBuilder[]): Promise<void> {
    const { sql } = this.options
    if (!this.tableReady) {
      await ensureRequestLogTable(sql)
      this.tableReady = true
    }
    // Every day a buffered record may fall on, before the batch: a failure keeps the rest pending.
    for (const day of this.pendingDays) {
      await ensurePartition(sql, day)
      this.readyDays.add(day)
      this.pendingDays.delete(day)
    }
    if (this.rowCopy === null) await insertAsJson(sql, rows)
    else await this.rowCopy.copy(rows)
  }

  /** A partition the retention dropped must be made again before a record of its day is written. */
  forgetDays(days: readonly number[]): void {
    for (const day of days) this.readyDays.delete(day)
    if (days.includes(this.lastDay)) this.lastDay = -1
  }

  /** Stops taking records, and writes the ones buffered (one try: the store closes next). */
  async close(): Promise<void> {
    this.closed = true
    if (this.timer !== null) clearInterval(this.timer)
    this.timer = null
    // A write that hangs (Postgres gone silent, or the embedded database closed under it) stays
    // pending: the close goes on without it, ends the COPY's connection, and the records it held
    // are lost.
    const last = async () => {
      await this.writing
      this.retryAt = 0
      await this.flush()
    }
    await withDeadline(last(), CLOSE_WAIT_MS).catch(() => {
      this.options.log.warn({ buffered: this.buffer.size }, 'request log: the last writes did not finish at close')
    })
    await this.rowCopy?.close()
  }
}

/**
 * The rows as one parameter, whatever the batch's size: JSON text (the store's pool passes no
 * arrays: store/postgres-options.ts), each array in Postgres's own text form, read by its type's input.
 */
async function insertAsJson(sql: Sql, rows: readonly RowBuilder[]): Promise<void> {
  await sql`
    insert into request_log_rows (${sql.unsafe(ROW_COLUMNS)})
    select account_id, to_timestamp(first_us / 1e6), to_timestamp(last_us / 1e6), records, tenant_set::uuid[],
      key_set::uuid[], route_set::text[], status_set::int2[], code_set::text[], not_2xx,
      refused_tenant_set::uuid[], refused_key_set::uuid[], id_stem, id_low, id_high,
      given_ids::text[], given_positions::int4[], ids::text[], times_us::int8[], tenant_ids::uuid[],
      key_ids::uuid[], methods::text[], routes::text[], paths::text[], statuses::int2[], codes::text[],
      durations_us::int8[], request_bytes::int8[], response_bytes::int8[], source_ips::text[], costs::int4[],
      units::text[], would_refuse::text[], outcomes::text[], cells::text[], trace_ids::text[]
    from json_to_recordset(${JSON.stringify(rows.map(rowText))}::text::json) as r(account_id uuid,
      first_us int8, last_us int8, records int, tenant_set text, key_set text, route_set text, status_set text,
      code_set text, not_2xx boolean, refused_tenant_set text, refused_key_set text, id_stem text, id_low int8,
      id_high int8, given_ids text, given_positions text, ids text, times_us text, tenant_ids text, key_ids text,
      methods text, routes text, paths text, statuses text, codes text, durations_us text, request_bytes text,
      response_bytes text, source_ips text, costs text, units text, would_refuse text, outcomes text, cells text,
      trace_ids text)`
}
