// The records not yet in Postgres, already made into their rows (rows.ts) as they arrive: a queue
// of rows, oldest first, each parent's newest still open to more records. The records themselves
// are not kept: a record object held until the next flush outlived the young generation, and the
// collections of the old one cost the proxy more than the writing (bench/README.md, the request
// log). Bounded: a full buffer drops its oldest row, whose records it counts.
import type { RequestRecord } from './capture.js'
import { RowBuilder } from './rows.js'

/** At most this share of the buffer is dropped at once: a row of a small buffer holds fewer records. */
const ROWS_A_BUFFER_AT_LEAST = 8

export class RowBuffer {
  /** The rows, oldest first, from `head` on (the queue's front is spent by moving `head`). */
  private queue: RowBuilder[] = []
  private head = 0
  /** Each parent's row still taking records; a row is closed when full, taken, or its day ends. */
  private readonly open = new Map<string, RowBuilder>()
  private count = 0
  private readonly rowRecords: number
  /** Records dropped because the buffer was full, since the start. */
  dropped = 0

  constructor(
    readonly capacity: number,
    rowRecords: number,
  ) {
    this.rowRecords = Math.max(1, Math.min(rowRecords, Math.floor(capacity / ROWS_A_BUFFER_AT_LEAST)))
  }

  /** Records waiting. */
  get size(): number {
    return this.count
  }

  /**
   * Adds a record of `day` (partitions.ts, dayOfRecord) to its parent's row; a full buffer first
   * lets its oldest row go (counted in `dropped`).
   */
  add(record: RequestRecord, day: number): void {
    if (this.count >= this.capacity) this.dropOldest()
    let row = this.open.get(record.accountId)
    if (row === undefined || row.day !== day) {
      row = new RowBuilder(record.accountId, day)
      this.open.set(record.accountId, row)
      this.queue.push(row)
    }
    row.add(record)
    this.count++
    if (row.size === this.rowRecords) this.open.delete(record.accountId)
  }

  /** Takes out the oldest rows, whole, up to `maxRecords` records (one row at least), oldest first. */
  take(maxRecords: number): RowBuilder[] {
    const taken: RowBuilder[] = []
    let records = 0
    while (this.head < this.queue.length) {
      const row = this.queue[this.head]!
      if (taken.length > 0 && records + row.size > maxRecords) break
      this.head++
      this.close(row)
      taken.push(row)
      records += row.size
    }
    this.count -= records
    this.compact()
    return taken
  }

  /**
   * Puts back rows whose write failed, before the ones added since: they are older. What does not
   * fit goes, its oldest rows first, and is counted in `dropped`.
   */
  putBack(rows: readonly RowBuilder[]): void {
    let first = 0
    let records = rows.reduce((sum, row) => sum + row.size, 0)
    while (first < rows.length && this.count + records > this.capacity) {
      records -= rows[first]!.size
      this.dropped += rows[first]!.size
      first++
    }
    this.queue = [...rows.slice(first), ...this.queue.slice(this.head)]
    this.head = 0
    this.count += records
  }

  private dropOldest(): void {
    const row = this.queue[this.head]
    if (row === undefined) return
    this.head++
    this.close(row)
    this.count -= row.size
    this.dropped += row.size
    this.compact()
  }

  /** A row leaving the queue takes no more records. */
  private close(row: RowBuilder): void {
    if (this.open.get(row.accountId) === row) this.open.delete(row.accountId)
  }

  /** Lets go of the spent front once it is most of the array. */
  private compact(): void {
    if (this.head > 64 && this.head * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.head)
      this.head = 0
    }
  }
}
