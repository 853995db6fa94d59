// The usage meter's flushing (usage/meter.ts): batches of counts written to Postgres once each,
// in the order they were taken. A batch whose write failed in a way that may have committed (a
// connection lost, a deadline) is in doubt: it goes again, as it was, with the same id, which
// keeps a retry of a flush that did commit from adding its counts twice. A batch that Postgres
// refused for its data (SQLSTATE classes 22 and 23: a row it cannot store) committed nothing: it
// is split in halves, each under a new id, until the row at fault stands alone, and that row is
// logged at error and counted (tgw_usage_flush_rows_refused_total); the others are written. One
// tenant's bad row never holds up the others' counts, nor is a refused batch retried whole forever.
import { randomUUID } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import { addUsage } from '../store/usage.js'
import type {
  FlushMark,
  KeyUnitCount,
  KeyUsageCount,
  LogDropCount,
  PeriodUnitCount,
  UsageCount,
} from '../store/usage-batch.js'
import type { MeterWrites } from './meter-writes.js'

/** One flush's rows (flush-rows.ts makes them): each set sorted by its table's key. */
export interface BatchRows {
  readonly rows: readonly UsageCount[]
  /** The same requests by calling key (usage by key), written in the same statement. */
  readonly keyRows: readonly KeyUsageCount[]
  /** Units by tenant, period and meter, and by key, day and meter: the same statement again. */
  readonly unitRows: readonly PeriodUnitCount[]
  readonly keyUnitRows: readonly KeyUnitCount[]
  /** Units of dropped request log records (usage_period_checks): the same statement again. */
  readonly logDropRows: readonly LogDropCount[]
}

export interface Batch extends BatchRows {
  readonly id: string
  /** When its oldest count was recorded. */
  readonly since: number
  /**
   * Everything counted before `through` is in this batch or an earlier one (usage_flush_marks).
   * The halves of a split batch carry it both: units of a period that closes between them move to
   * the first open one, as late units (store/usage.ts), as those of any late flush do.
   */
  readonly mark: FlushMark
  /** A half of a refused batch (its refusal was logged once, for the whole). */
  readonly split?: true
}

const KINDS = ['rows', 'keyRows', 'unitRows', 'keyUnitRows', 'logDropRows'] as const

/** How many rows a batch holds, of every kind. */
export function rowCount(batch: BatchRows): number {
  return KINDS.reduce((sum, kind) => sum + batch[kind].length, 0)
}

/**
 * The two halves of a batch of two rows or more, by row count, each under a new id (the batch
 * committed nothing, so neither can count twice). The rows keep their order: each half's sets are
 * still sorted by their table's key.
 */
export function halves(batch: Batch): [Batch, Batch] {
  let left = Math.ceil(rowCount(batch) / 2)
  const first: Record<(typeof KINDS)[number], unknown[]> = {
    rows: [],
    keyRows: [],
    unitRows: [],
    keyUnitRows: [],
    logDropRows: [],
  }
  const second: typeof first = { rows: [], keyRows: [], unitRows: [], keyUnitRows: [], logDropRows: [] }
  for (const kind of KINDS) {
    const rows = batch[kind] as readonly unknown[]
    const taken = Math.min(left, rows.length)
    first[kind] = rows.slice(0, taken)
    second[kind] = rows.slice(taken)
    left -= taken
  }
  const half = (rows: typeof first): Batch => ({
    ...(rows as unknown as BatchRows),
    id: randomUUID(),
    since: batch.since,
    mark: batch.mark,
    split: true,
  })
  return [half(first), half(second)]
}

/**
 * Whether Postgres refused the statement for its data (SQLSTATE class 22, data exception, or 23,
 * integrity constraint violation): the same rows would be refused again, and, as an error answer
 * ends the statement's implicit transaction, nothing of it committed. Anything else (a lost
 * connection, a deadline, a server shutting down) may pass on a retry.
 */
export function refusedForItsData(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code
  return typeof code === 'string' && /^2[23][0-9A-Z]{3}$/.test(code)
}

export interface MeterFlushOptions {
  writes: MeterWrites
  log: FastifyBaseLogger
  /** Told of each flush that failed (a metric). */
  onFlushFailed?: (() => void) | undefined
  /** Told of each row Postgres refused, which is dropped (a metric). */
  onRowRefused?: (() => void) | undefined
}

export class MeterFlush {
  /**
   * Batches Postgres has not taken, oldest first: the first may have committed (its write failed
   * in doubt); the ones after it are halves of a refused batch, never sent yet or in doubt alike.
   */
  private queue: Batch[] = []
  /** Writes that failed since the last that went through (0: the last went through): the first is logged, the rest counted. */
  failedInARow = 0
  private readonly options: MeterFlushOptions
  constructor(options: MeterFlushOptions) {
    this.options = options
  }

  /** Whether a batch is still to be written (in doubt, or halves of a refused one). */
  get pending(): boolean {
    return this.queue.length > 0
  }

  /** When the oldest count of the batches not written was recorded; null when there is none. */
  get since(): number | null {
    return this.queue[0]?.since ?? null
  }

  /** The first batch in doubt, for the stop's log. */
  get firstId(): string | undefined {
    return this.queue[0]?.id
  }

  /** The rows of every batch not written yet. */
  unwritten(): readonly Batch[] {
    return this.queue
  }

  /**
   * Writes the batches not written yet, then `next` (if any): true once all are in. A batch in
   * doubt stops there (`next` is kept, in doubt too, unless it has no rows: a mark alone is not
   * kept, the next one supersedes it). The meter sends `next` only once the others are in.
   */
  async write(next?: Batch): Promise<boolean> {
    if (next !== undefined) {
      if (rowCount(next) === 0) return (await this.send(next)) === 'in'
      this.queue.push(next)
    }
    while (this.queue.length > 0) {
      const batch = this.queue[0]!
      const outcome = await this.send(batch)
      if (outcome === 'in doubt') return false
      if (outcome === 'in') this.queue.shift()
      else if (rowCount(batch) > 1) this.queue.splice(0, 1, ...halves(batch))
      else {
        this.queue.shift()
        this.options.log.error(
          { err: outcome.err, row: onlyRow(batch), batch: batch.id },
          'usage: Postgres refused this count; it is dropped, and the rest of its flush is written',
        )
        this.options.onRowRefused?.()
      }
    }
    return true
  }

  /** Adds one batch to Postgres: in, in doubt (it may have committed), or refused for its data. */
  private async send(batch: Batch): Promise<'in' | 'in doubt' | { err: unknown }> {
    try {
      await this.options.writes.run((sql) =>
        addUsage(sql, batch.id, {
          counts: batch.rows,
          keyCounts: batch.keyRows,
          unitCounts: batch.unitRows,
          keyUnitCounts: batch.keyUnitRows,
          logDropCounts: batch.logDropRows,
          mark: batch.mark,
          since: new Date(batch.since),
        }),
      )
      if (this.failedInARow > 0)
        this.options.log.info(
          { failures: this.failedInARow, batch: batch.id },
          'usage flush went through again; the counts kept meanwhile are in',
        )
      this.failedInARow = 0
      return 'in'
    } catch (err) {
      this.options.onFlushFailed?.()
      if (refusedForItsData(err)) {
        if (batch.split !== true)
          this.options.log.warn(
            { err, rows: rowCount(batch), batch: batch.id },
            'usage flush refused by Postgres for its data; split to find the rows at fault, the others are written',
          )
        return { err }
      }
      // Once per outage: every failure is counted (tgw_usage_flush_failures_total), and the lag
      // (tgw_usage_flush_lag_seconds) says how long it has lasted.
      if (this.failedInARow++ === 0)
        this.options.log.warn(
          { err, rows: batch.rows.length, batch: batch.id },
          'usage flush failed; the counts are kept and retried every second with the same batch id',
        )
      return 'in doubt'
    }
  }
}

/** The one row of a batch of one row, named by its kind (`{unitRows: {…}}`). */
function onlyRow(batch: BatchRows): unknown {
  const kind = KINDS.find((k) => batch[k].length > 0)!
  return { [kind]: batch[kind][0] }
}
