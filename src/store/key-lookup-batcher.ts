// Key lookups to Postgres, coalesced and paced (docs/architecture.md, caches; docs/decisions.md).
// The key checksum is public, so a random well-formed key costs an attacker nothing: one query
// per key would let one client drive Postgres at its own rate. Here the digests waiting for
// Postgres go out together in one query, one query at a time, and query starts are paced: up to
// `burst` at once, then one per `intervalMs`. A lookup with nothing ahead of it starts at once.
// Nothing is refused here: a lookup waits its turn, and its caller's deadline bounds the wait.
import { withDeadline } from './db.js'

export interface KeyBatchPacing {
  /** Query starts beyond the burst are this far apart: at most 1000 / intervalMs queries a second. */
  intervalMs: number
  /** How many queries may start back to back after a quiet spell (sparse cold keys never wait). */
  burst: number
  /** The most digests one query asks for. */
  maxDigests: number
  /** A query still unanswered after this long fails its lookups and lets the next query start. */
  queryDeadlineMs: number
}

export const DEFAULT_KEY_BATCH_PACING: KeyBatchPacing = {
  intervalMs: 5,
  burst: 4,
  maxDigests: 500,
  queryDeadlineMs: 500,
}

/** Time and timers, replaceable so that the pacing can be tested without waiting. */
export interface BatchClock {
  now(): number
  setTimeout(run: () => void, ms: number): void
}

const realClock: BatchClock = {
  now: () => performance.now(),
  setTimeout: (run, ms) => {
    setTimeout(run, ms)
  },
}

/** What the query returns for each digest it found; digests it did not find are simply absent. */
export interface FoundByDigest<Row> {
  readonly keyDigest: Buffer
  readonly row: Row
}

interface Waiter<Row> {
  resolve(row: Row | null): void
  reject(err: unknown): void
}

interface Pending<Row> {
  readonly digest: Buffer
  readonly waiters: Waiter<Row>[]
}

export interface KeyLookupBatcherOptions {
  pacing?: Partial<KeyBatchPacing>
  /** Called as each query starts, with how many digests it asks for (the metrics). */
  onQuery?: (digests: number) => void
  clock?: BatchClock
}

export class KeyLookupBatcher<Row> {
  private readonly pacing: KeyBatchPacing
  private readonly clock: BatchClock
  /** Waiting for a query, oldest first, one entry per digest (hex). */
  private readonly pending = new Map<string, Pending<Row>>()
  private inFlight = false
  private timerSet = false
  /**
   * The pace as a virtual schedule (GCRA): each start moves it `intervalMs` past max(it, now); a
   * start is allowed while it stays within `burst` intervals of now. So any window of W ms holds
   * at most burst + W / intervalMs starts, and a quiet replica starts a query at once.
   */
  private paceAt = Number.NEGATIVE_INFINITY

  constructor(
    private readonly query: (digests: readonly Buffer[]) => Promise<readonly FoundByDigest<Row>[]>,
    private readonly options: KeyLookupBatcherOptions = {},
  ) {
    this.pacing = { ...DEFAULT_KEY_BATCH_PACING, ...options.pacing }
    this.clock = options.clock ?? realClock
  }

  /** The row of the key with this digest, or null; shares a query with the lookups waiting with it. */
  lookup(digest: Buffer): Promise<Row | null> {
    return new Promise<Row | null>((resolve, reject) => {
      const hex = digest.toString('hex')
      const pending = this.pending.get(hex)
      if (pending === undefined) this.pending.set(hex, { digest, waiters: [{ resolve, reject }] })
      else pending.waiters.push({ resolve, reject })
      this.pump()
    })
  }

  /** How many digests wait for a query (not those of the query in flight). */
  get waiting(): number {
    return this.pending.size
  }

  private pump(): void {
    if (this.inFlight || this.timerSet || this.pending.size === 0) return
    const now = this.clock.now()
    const from = Math.max(this.paceAt, now)
    const wait = from + this.pacing.intervalMs - this.pacing.burst * this.pacing.intervalMs - now
    if (wait > 0) {
      this.timerSet = true
      this.clock.setTimeout(() => {
        this.timerSet = false
        this.pump()
      }, wait)
      return
    }
    this.paceAt = from + this.pacing.intervalMs
    this.start(this.takeBatch())
  }

  private takeBatch(): Pending<Row>[] {
    const batch: Pending<Row>[] = []
    for (const [hex, pending] of this.pending) {
      if (batch.length === this.pacing.maxDigests) break
      batch.push(pending)
      this.pending.delete(hex)
    }
    return batch
  }

  private start(batch: Pending<Row>[]): void {
    this.inFlight = true
    this.options.onQuery?.(batch.length)
    // A query that throws at once fails its lookups like one that rejects.
    const answered = Promise.resolve().then(() =>
      withDeadline(this.query(batch.map((p) => p.digest)), this.pacing.queryDeadlineMs),
    )
    answered
      .then(
        (found) => {
          const rows = new Map(found.map((f) => [f.keyDigest.toString('hex'), f.row]))
          for (const pending of batch) {
            const row = rows.get(pending.digest.toString('hex')) ?? null
            for (const waiter of pending.waiters) waiter.resolve(row)
          }
        },
        (err: unknown) => {
          for (const pending of batch) for (const waiter of pending.waiters) waiter.reject(err)
        },
      )
      .finally(() => {
        this.inFlight = false
        this.pump()
      })
  }
}
