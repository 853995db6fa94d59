// The first tier of the tenancy lookups (cache/tiered.ts): a bounded in-process LRU with a short
// TTL, whose entries are refreshed in the background while in use and kept past their TTL for the
// stale window, for when Postgres cannot answer (docs/internals.md, caches).
import { LRUCache } from 'lru-cache'
import type { CacheTimings } from './settings.js'

export interface Entry {
  readonly value: unknown
  readonly storedAt: number
  /** When the Postgres read behind the value began (Date.now()): what this replica knows of the entry. */
  readonly asOf: number
  /**
   * From this instant (Date.now()) a read of the entry still gets it at once, and starts one
   * fill in the background to replace it; Infinity for "not found", which simply expires.
   */
  readonly refreshAt: number
}

/** An entry's share of the heap, roughly: its JSON as two-byte characters, and the objects around it. */
function estimatedBytes(entry: Entry): number {
  return 2 * (JSON.stringify(entry.value)?.length ?? 0) + 256
}

export class LocalTier {
  private readonly timings: CacheTimings
  private readonly local: LRUCache<string, Entry>
  /** How long a proxied route may reuse an admission (tenancy/recent-admissions.ts): a fifth of the TTL, at most 1 s. */
  readonly reuseWindowMs: number
  /**
   * The in-process TTL of a found record, shortened by that window, so that a reused admission
   * never outlives the configured TTL (docs/internals.md: a lost invalidation is bounded by it).
   */
  private readonly foundTtlMs: number
  /**
   * A found record read in the second half of its in-process TTL is refreshed in the background,
   * so that an entry in use never expires and no request waits for Redis or Postgres once warm.
   * Half, so that a proxied route, which reads its entries once per admission window (up to 1 s
   * apart, and a little more when the event loop is busy), reads each at least once in that half.
   * A refresh only reads the stores again: it cannot make an entry staler.
   */
  private readonly refreshAfterMs: number
  /**
   * Entries stored before this instant are no longer trusted (the bus may have missed messages),
   * but stay for the stale window: while Postgres is down they are all a known key has.
   */
  private trustedFrom = 0

  constructor(timings: CacheTimings) {
    this.timings = timings
    this.reuseWindowMs = Math.min(1_000, Math.floor(timings.localTtlMs / 5))
    this.foundTtlMs = timings.localTtlMs - this.reuseWindowMs
    this.refreshAfterMs = Math.floor(this.foundTtlMs / 2)
    // Bounded by bytes here and by count in remember(), never by lru-cache's `max`: that allocates
    // arrays of `max` slots at once (100,000 by default), a cost every app paid at its start.
    this.local = new LRUCache<string, Entry>({
      maxSize: timings.maxEstimatedBytes,
      sizeCalculation: estimatedBytes,
      ttl: this.foundTtlMs,
      // Expired entries stay (until the LRU pushes them out) for the stale window.
      noDeleteOnStaleGet: true,
    })
  }

  /** The entry, unless it expired or was stored before the tier stopped trusting its entries. */
  trusted(key: string): Entry | undefined {
    const entry = this.local.get(key, { allowStale: false })
    return entry !== undefined && entry.storedAt > this.trustedFrom ? entry : undefined
  }

  /** The entry, expired or not, if it was stored within the stale window: for when Postgres cannot answer. */
  withinStaleWindow(key: string): Entry | undefined {
    const stale = this.local.get(key, { allowStale: true })
    return stale !== undefined && Date.now() - stale.storedAt < this.timings.staleWindowMs ? stale : undefined
  }

  /** When the read behind the entry held here began (kept past its TTL, until the LRU needs the room); 0 for none. */
  heldAsOf(key: string): number {
    return this.local.peek(key, { allowStale: true })?.asOf ?? 0
  }

  remember(key: string, value: unknown, asOf: number): void {
    const now = Date.now()
    if (value === null)
      this.local.set(key, { value, storedAt: now, asOf, refreshAt: Infinity }, { ttl: this.timings.negativeTtlMs })
    else
      this.local.set(
        key,
        { value, storedAt: now, asOf, refreshAt: now + this.refreshAfterMs },
        { ttl: this.foundTtlMs },
      )
    // The least recently used goes, as lru-cache's `max` would have it go.
    if (this.local.size > this.timings.maxEntries) this.local.pop()
  }

  delete(key: string): void {
    this.local.delete(key)
  }

  /** Stops trusting every entry stored before now; they stay for the stale window. */
  distrust(): void {
    this.trustedFrom = Date.now()
  }
}
