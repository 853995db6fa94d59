// Key lookups to Postgres, coalesced and paced (docs/internals.md, caches;
// docs/decisions/0241-key-lookups-are-batched-and-paced-not-refused.md); also those of client ids
// (oauth/client-lookups.ts) and portal credentials (portal/credential-lookups.ts). The key checksum is
// public, so a random well-formed key costs an attacker nothing: one query per key would let one client
// drive Postgres at its own rate. Here the digests waiting for Postgres go out together in one query, one
// query at a time, and query starts are paced: up to
// `burst` at once, then one per `intervalMs`. A lookup with nothing ahead of it starts at once.
// Nothing is refused here: a lookup waits its turn, and its caller's deadline bounds the wait.
import { ApiError } from '../errors.js'
import { QueryTimeoutError } from './db.js'

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
  /** Runs `run` after `ms`; returns what cancels it. */
  setTimeout(run: () => void, ms: number): () => void
}

const realClock: BatchClock = {
  now: () => performance.now(),
  setTimeout: (run, ms) => {
    const timer = setTimeout(run, ms)
    return () => clearTimeout(timer)
  },
}

/** How many queries may be in flight at once: a second only for a backlog growing old. */
const MAX_IN_FLIGHT = 2

/** What the query returns for each digest it found; digests it did not find are simply absent. */
export interface FoundByDigest<Row> {
  readonly keyDigest: Buffer
  readonly row: Row
}

interface Waiter<Row> {
  resolve(row: Row | null): void
  reject(err: unknown): void
  /** Cancels the waiter's deadline. */
  cancel: () => void
}

interface Pending<Row> {
  readonly digest: Buffer
  readonly waiters: Waiter<Row>[]
  /** When its first waiter came: the backlog's age is its oldest entry's. */
  readonly since: number
}

export interface KeyLookupBatcherOptions {
  pacing?: Partial<KeyBatchPacing>
  /** Called as each query starts, with how many digests it asks for (the metrics). */
  onQuery?: (digests: number) => void
  clock?: BatchClock
  /** The 503's detail for a lookup that waited past its deadline for its turn; names what was looked up. */
  busyDetail?: string
}

export class KeyLookupBatcher<Row> {
  private readonly pacing: KeyBatchPacing
  private readonly clock: BatchClock
  /** The 503's detail for a lookup that waited past its deadline for its turn. */
  private readonly busyDetail: string
  /** Waiting for a query, oldest first, one entry per digest (hex). */
  private readonly pending = new Map<string, Pending<Row>>()
  private inFlight = 0
  /** A pump is due when the pace allows the next start. */
  private paceTimerSet = false
  /** A pump is due when the backlog is old enough for a second query. */
  private ageTimerSet = false
  /**
   * The pace as a virtual schedule (GCRA): each start moves it `intervalMs` past max(it, now); a
   * start is allowed while it stays within `burst` intervals of now. So any window of W ms holds
   * at most burst + W / intervalMs starts, and a quiet replica starts a query at once.
   */
  private paceAt = Number.NEGATIVE_INFINITY

  private readonly query: (digests: readonly Buffer[]) => Promise<readonly FoundByDigest<Row>[]>
  private readonly options: KeyLookupBatcherOptions
  constructor(
    query: (digests: readonly Buffer[]) => Promise<readonly FoundByDigest<Row>[]>,
    options: KeyLookupBatcherOptions = {},
  ) {
    this.query = query
    this.options = options
    this.pacing = { ...DEFAULT_KEY_BATCH_PACING, ...options.pacing }
    this.clock = options.clock ?? realClock
    this.busyDetail = options.busyDetail ?? 'the key could not be looked up in time; try again'
  }

  /**
   * The row of the key with this digest, or null; shares a query with the lookups waiting with it.
   * Past `deadlineMs` the lookup fails: a lookup still waiting for its turn leaves the queue (its
   * digest too, if nobody else waits for it) with a 503 of its own, which says nothing of
   * Postgres's health; one whose query is under way fails as a query past its deadline does.
   */
  lookup(digest: Buffer, deadlineMs = this.pacing.queryDeadlineMs): Promise<Row | null> {
    return new Promise<Row | null>((resolve, reject) => {
      const hex = digest.toString('hex')
      let settled = false
      const waiter: Waiter<Row> = {
        resolve: (row) => {
          if (settled) return
          settled = true
          waiter.cancel()
          resolve(row)
        },
        reject: (err) => {
          if (settled) return
          settled = true
          waiter.cancel()
          reject(err)
        },
        cancel: () => {},
      }
      waiter.cancel = this.clock.setTimeout(() => this.expire(hex, waiter, deadlineMs), deadlineMs)
      const pending = this.pending.get(hex)
      if (pending === undefined) this.pending.set(hex, { digest, waiters: [waiter], since: this.clock.now() })
      else pending.waiters.push(waiter)
      this.pump()
    })
  }

  private expire(hex: string, waiter: Waiter<Row>, deadlineMs: number): void {
    const pending = this.pending.get(hex)
    const index = pending?.waiters.indexOf(waiter) ?? -1
    if (pending === undefined || index === -1) {
      waiter.reject(new QueryTimeoutError(deadlineMs))
      return
    }
    pending.waiters.splice(index, 1)
    if (pending.waiters.length === 0) this.pending.delete(hex)
    waiter.reject(new ApiError('store_unavailable', this.busyDetail))
  }

  /** How many digests wait for a query (not those of the query in flight). */
  get waiting(): number {
    return this.pending.size
  }

  private pump(): void {
    if (this.paceTimerSet || this.pending.size === 0 || this.inFlight >= MAX_IN_FLIGHT) return
    const now = this.clock.now()
    // One query at a time, unless the oldest waiting digest has used a fifth of its deadline (a
    // slow Postgres or a flood): then a second may start, still within the pace, so that a key
    // behind a slow query is not failed for the wait alone.
    if (this.inFlight > 0) {
      const young = this.pending.values().next().value!.since + this.pacing.queryDeadlineMs / 5 - now
      if (young > 0 && !this.ageTimerSet) {
        this.ageTimerSet = true
        this.clock.setTimeout(() => {
          this.ageTimerSet = false
          this.pump()
        }, young)
      }
      if (young > 0) return
    }
    const from = Math.max(this.paceAt, now)
    const wait = from + this.pacing.intervalMs - this.pacing.burst * this.pacing.intervalMs - now
    if (wait > 0) {
      this.paceTimerSet = true
      this.clock.setTimeout(() => {
        this.paceTimerSet = false
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

  /** The query's answer, or QueryTimeoutError past the deadline (on the batcher's clock). */
  private withinDeadline<T>(query: Promise<T>): Promise<T> {
    const deadlineMs = this.pacing.queryDeadlineMs
    let cancel = () => {}
    const late = new Promise<never>((_, reject) => {
      cancel = this.clock.setTimeout(() => reject(new QueryTimeoutError(deadlineMs)), deadlineMs)
    })
    return Promise.race([query, late]).finally(cancel)
  }

  private start(batch: Pending<Row>[]): void {
    this.inFlight++
    this.options.onQuery?.(batch.length)
    // A query that throws at once fails its lookups like one that rejects.
    const answered = Promise.resolve().then(() => this.withinDeadline(this.query(batch.map((p) => p.digest))))
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
        this.inFlight--
        this.pump()
      })
  }
}
