// The records not yet in Postgres, already made into their rows (rows.ts) as they arrive: a queue
// of rows, oldest first, each parent's newest of each day still open to more records. The records
// themselves are not kept: a record object held until the next flush outlived the young
// generation, and the collections of the old one cost the proxy more than the writing
// (bench/README.md, the request log). Bounded in records and in rows (a row's arrays and sets take
// memory of their own): a full buffer drops its oldest row, whose records it counts.
import type { RequestRecord } from './capture.js'
import { ADDED, RowBuilder, TOO_NEW } from './rows.js'

/** At most this share of the buffer is dropped at once: a row of a small buffer holds fewer records. */
const ROWS_A_BUFFER_AT_LEAST = 8
/**
 * What a row's own memory weighs, in records: a row of one record takes about 4.4 KB, a record in
 * a full row about 350 bytes. A buffer holds at most capacity / ROW_WEIGHT rows (ROWS_A_BUFFER_AT_LEAST
 * at least), so that a buffer of one-record rows (many parents, Postgres down) takes no more memory
 * than one of full rows.
 */
export const ROW_WEIGHT = 12

/**
 * The most characters of paths the buffer holds (about 16 MB): a record's path is up to 16 KiB, so
 * that 100,000 records of long paths would otherwise outgrow a replica's heap (160 MB in the image).
 */
export const DEFAULT_BUFFER_PATH_CHARS = 16 * 1024 * 1024

/** The key of a parent's open row of an earlier day than its newest. */
const earlierKey = (accountId: string, day: number) => `${accountId}/${day}`

export class RowBuffer {
  /**
   * The rows, oldest first, from `head` on (the queue's front is spent by moving `head`, each spent
   * place emptied: a row taken or dropped must not stay reachable until the next compaction).
   */
  private queue: (RowBuilder | null)[] = []
  private head = 0
  /** Each parent's row of its newest day still taking records; closed when full, taken or dropped. */
  private readonly open = new Map<string, RowBuilder>()
  /**
   * A parent's rows of earlier days still taking records (earlierKey): requests that began before
   * midnight and end after it are recorded at their start, so two days' records come in turn for
   * a while. Apart, so that the common case looks a parent up by its id alone.
   */
  private readonly openEarlier = new Map<string, RowBuilder>()
  /**
   * A parent's row of late records of a day (earlierKey): records whose ids are too far below its
   * open row's to join it (made-ids.ts, MAX_ID_SPAN), the answers of requests that took long. Apart, so
   * that each of them does not close the row the parent's other records fill.
   */
  private readonly openLate = new Map<string, RowBuilder>()
  private count = 0
  /** The characters of the paths of the records waiting (RowBuilder.pathChars). */
  private pathChars = 0
  private readonly maxPathChars: number
  private readonly rowRecords: number
  private readonly maxRows: number
  /** Records dropped because the buffer was full, since the start. */
  dropped = 0
  /** Told of each row dropped (the usage meter counts its forwarded units: ops/request-accounting.ts). */
  onDropped: ((row: RowBuilder) => void) | null = null

  readonly capacity: number
  constructor(capacity: number, rowRecords: number, maxPathChars = DEFAULT_BUFFER_PATH_CHARS) {
    this.capacity = capacity
    this.maxPathChars = maxPathChars
    if (!(capacity >= 1)) throw new RangeError(`a request log buffer holds a record at least, not ${capacity}`)
    this.rowRecords = Math.max(1, Math.min(rowRecords, Math.floor(capacity / ROWS_A_BUFFER_AT_LEAST)))
    this.maxRows = Math.max(ROWS_A_BUFFER_AT_LEAST, Math.floor(capacity / ROW_WEIGHT))
  }

  /** Rows waiting. */
  private get rows(): number {
    return this.queue.length - this.head
  }

  /** Records waiting. */
  get size(): number {
    return this.count
  }

  /**
   * Adds a record of `day` (partitions.ts, dayOfRecord) to its parent's row of that day; a full
   * buffer first lets its oldest rows go (counted in `dropped`).
   */
  add(record: RequestRecord, day: number): void {
    const accountId = record.accountId
    let row = this.openRow(accountId, day)
    while (
      this.count >= this.capacity ||
      (row === undefined && this.rows >= this.maxRows) ||
      this.overPathChars(record)
    ) {
      this.dropOldest()
      row = this.openRow(accountId, day) // the row dropped may have been this one
    }
    row ??= this.newRow(accountId, day)
    const added = row.add(record)
    if (added !== ADDED) {
      // Its id too far from the row's (made-ids.ts, MAX_ID_SPAN): a newer one begins the parent's next row.
      if (added === TOO_NEW) {
        this.close(row)
        this.add(record, day)
      } else this.addLate(record, day)
      return
    }
    this.count++
    this.pathChars += record.path.length
    if (row.size === this.rowRecords) this.close(row)
  }

  /** Whether `record`'s path would take the buffer past its characters of paths, with rows to drop for it. */
  private overPathChars(record: RequestRecord): boolean {
    return this.pathChars + record.path.length > this.maxPathChars && this.rows > 0
  }

  /** Adds a late record to the parent's row of late records of `day`, or to a new one. */
  private addLate(record: RequestRecord, day: number): void {
    const key = earlierKey(record.accountId, day)
    let row = this.openLate.get(key)
    if (row === undefined || row.add(record) !== ADDED) {
      if (row !== undefined) this.close(row)
      while (this.count >= this.capacity || this.rows >= this.maxRows || this.overPathChars(record)) this.dropOldest()
      row = new RowBuilder(record.accountId, day)
      this.queue.push(row)
      this.openLate.set(key, row)
      row.add(record) // an empty row takes any record
    }
    this.count++
    this.pathChars += record.path.length
    if (row.size === this.rowRecords) this.close(row)
  }

  /**
   * Takes out the oldest rows, whole, up to `maxRecords` records and `maxPathChars` characters of
   * paths (one row at least), oldest first.
   */
  take(maxRecords: number, maxPathChars = Number.POSITIVE_INFINITY): RowBuilder[] {
    const taken: RowBuilder[] = []
    let records = 0
    let pathChars = 0
    while (this.head < this.queue.length) {
      const row = this.queue[this.head]!
      if (taken.length > 0 && (records + row.size > maxRecords || pathChars + row.pathChars > maxPathChars)) break
      this.queue[this.head] = null
      this.head++
      this.close(row)
      taken.push(row)
      records += row.size
      pathChars += row.pathChars
      this.pathChars -= row.pathChars
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
    let pathChars = rows.reduce((sum, row) => sum + row.pathChars, 0)
    while (
      first < rows.length &&
      (this.count + records > this.capacity ||
        this.rows + rows.length - first > this.maxRows ||
        this.pathChars + pathChars > this.maxPathChars)
    ) {
      records -= rows[first]!.size
      pathChars -= rows[first]!.pathChars
      this.dropped += rows[first]!.size
      this.onDropped?.(rows[first]!)
      first++
    }
    this.queue = [...rows.slice(first), ...this.queue.slice(this.head)]
    this.head = 0
    this.count += records
    this.pathChars += pathChars
  }

  private dropOldest(): void {
    const row = this.queue[this.head]!
    this.queue[this.head] = null
    this.head++
    this.close(row)
    this.count -= row.size
    this.pathChars -= row.pathChars
    this.dropped += row.size
    this.onDropped?.(row)
    this.compact()
  }

  private openRow(accountId: string, day: number): RowBuilder | undefined {
    const newest = this.open.get(accountId)
    if (newest !== undefined && newest.day === day) return newest
    return this.openEarlier.size === 0 ? undefined : this.openEarlier.get(earlierKey(accountId, day))
  }

  private newRow(accountId: string, day: number): RowBuilder {
    const row = new RowBuilder(accountId, day)
    const newest = this.open.get(accountId)
    if (newest === undefined || newest.day < day) {
      if (newest !== undefined) this.openEarlier.set(earlierKey(accountId, newest.day), newest)
      this.open.set(accountId, row)
    } else this.openEarlier.set(earlierKey(accountId, day), row)
    this.queue.push(row)
    return row
  }

  /** A row full, or leaving the queue, takes no more records. */
  private close(row: RowBuilder): void {
    if (this.open.get(row.accountId) === row) this.open.delete(row.accountId)
    else {
      const key = earlierKey(row.accountId, row.day)
      if (this.openEarlier.get(key) === row) this.openEarlier.delete(key)
      else if (this.openLate.get(key) === row) this.openLate.delete(key)
    }
  }

  /** Lets go of the spent front once it is most of the array. */
  private compact(): void {
    if (this.head > 64 && this.head * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.head)
      this.head = 0
    }
  }
}
