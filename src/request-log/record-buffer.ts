// The records not yet in Postgres, in a fixed array used as a ring: a full buffer drops its oldest
// record rather than grow (docs/operations.md, the request log).

/** One answered request, as the request log keeps it (docs/api.md, Request log). */
export interface RequestRecord {
  id: string
  /** The id is the client's X-Request-Id, not one the gateway made. */
  idGiven: boolean
  /** When the request arrived, ms since the epoch. */
  timeMs: number
  accountId: string
  tenantId: string
  keyId: string
  method: string
  /** The route's prefix, or `management`. */
  route: string
  /** The path without its query string. */
  path: string
  status: number
  /** The problem code of a refusal; null for an answer that is not one. */
  code: string | null
  durationMs: number
  requestBytes: number
  responseBytes: number
  sourceIp: string
}

export class RecordBuffer<T> {
  /** A ring: `head` is the oldest record, `count` follow it. */
  private readonly ring: (T | null)[]
  private head = 0
  private count = 0
  /** Records dropped because the buffer was full, since the start. */
  dropped = 0

  constructor(readonly capacity: number) {
    this.ring = new Array<T | null>(capacity).fill(null)
  }

  get size(): number {
    return this.count
  }

  /** Adds a record; a full buffer lets its oldest go (counted in `dropped`). */
  add(record: T): void {
    if (this.count === this.capacity) {
      this.head = (this.head + 1) % this.capacity
      this.count--
      this.dropped++
    }
    this.ring[(this.head + this.count) % this.capacity] = record
    this.count++
  }

  /** Takes out the oldest `max` records at most, oldest first. */
  take(max: number): T[] {
    const n = Math.min(max, this.count)
    const batch = new Array<T>(n)
    for (let i = 0; i < n; i++) {
      const at = (this.head + i) % this.capacity
      batch[i] = this.ring[at]!
      this.ring[at] = null
    }
    this.head = (this.head + n) % this.capacity
    this.count -= n
    return batch
  }

  /**
   * Puts back a batch whose write failed, before the records added since: it is older. What does
   * not fit goes, its oldest first, and is counted in `dropped`.
   */
  putBack(batch: readonly T[]): void {
    const kept = Math.min(batch.length, this.capacity - this.count)
    this.dropped += batch.length - kept
    for (let i = batch.length - 1; i >= batch.length - kept; i--) {
      this.head = (this.head - 1 + this.capacity) % this.capacity
      this.ring[this.head] = batch[i]!
      this.count++
    }
  }
}
