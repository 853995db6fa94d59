// Counts requests per tenant, UTC day and status class in memory and adds them to Postgres about
// once a second, in one statement, and at shutdown (docs/api.md, usage; docs/internals.md).
// Keys' last_used_at rides on the same flush, at most once a minute per key: nothing is written
// on the request path.
import { randomUUID } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import type { Sql } from '../store/db.js'
import { addUsage, type KeyUsageCount, touchKeys, type UsageCount } from '../store/usage.js'

export const FLUSH_INTERVAL_MS = 1_000
export const LAST_USED_RESOLUTION_MS = 60_000
const DAY_MS = 86_400_000

// A tenant's pending counts of one day, in one array: requests of the classes 2xx to 5xx, then
// those of them that were forwarded upstream, then the 429s of a rate limit and of a quota.
const FORWARDED = 4
const LIMITED_RATE = 8
const LIMITED_QUOTA = 9

export interface MeterOptions {
  sql: Sql
  log: FastifyBaseLogger
  flushIntervalMs?: number
  now?: () => number
  /** Told of each flush that failed (a metric). */
  onFlushFailed?: () => void
}

/** `YYYY-MM-DD` of a UTC instant. */
export function utcDay(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10)
}

interface Batch {
  readonly id: string
  readonly rows: readonly UsageCount[]
  /** The same requests by calling key (usage by key), written in the same statement. */
  readonly keyRows: readonly KeyUsageCount[]
  /** When its oldest count was recorded. */
  readonly since: number
}

export class UsageMeter {
  /**
   * Requests not yet in Postgres: UTC day → tenant id → counts (FORWARDED above). Keyed
   * by strings the request already holds (the day is cached, the id is the tenant record's), so
   * counting one builds no string.
   */
  private counts: PendingCounts = new Map()
  /** The same requests by key: UTC day → tenant id → key id → requests of the classes 2xx to 5xx. */
  private keyCounts: PendingKeyCounts = new Map()
  /** When the oldest of `counts` was recorded; null while nothing is pending. */
  private pendingSince: number | null = null
  /** A flush that failed: it may have committed, so it is retried with the same id. */
  private inDoubt: Batch | null = null
  /** keyId → last use not yet written. */
  private keyUses = new Map<string, number>()
  /** keyId → when its last_used_at was last written (or queued), for the once-a-minute rule. */
  private readonly keyWrittenAt = new Map<string, number>()
  /** The current UTC day and its bounds, so that a request does not format a date. */
  private day = { text: '', startMs: 0, endMs: 0 }
  private timer: NodeJS.Timeout | null = null
  private flushing: Promise<void> | null = null
  private readonly now: () => number

  private readonly options: MeterOptions
  constructor(options: MeterOptions) {
    this.options = options
    this.now = options.now ?? Date.now
  }

  start(): void {
    if (this.timer !== null) return
    this.timer = setInterval(() => void this.flush(), this.options.flushIntervalMs ?? FLUSH_INTERVAL_MS)
    this.timer.unref()
  }

  /**
   * One answered request, for the tenant it acted as. Statuses below 200 are not counted.
   * `forwarded`: it was sent on to an upstream, which is what a monthly quota counts (docs/api.md).
   * `keyId`: the key that made it, for the usage by key (the tenant's counts are kept either way).
   */
  record(tenantId: string, statusCode: number, forwarded = false, keyId?: string): void {
    // A WebSocket's 101 is its upgrade's success: counted with the 2xx (docs/api.md, WebSockets).
    const statusClass = statusCode === 101 ? 2 : Math.floor(statusCode / 100)
    if (statusClass < 2 || statusClass > 5) return
    const counts = this.countsOf(tenantId)
    counts[statusClass - 2]!++
    if (forwarded) counts[FORWARDED + statusClass - 2]!++
    if (keyId !== undefined) this.keyCountsOf(tenantId, keyId)[statusClass - 2]!++
  }

  /**
   * A request the gateway refused with 429 for a rate limit or a monthly quota, for the tenant it
   * acted as: counted apart, for the usage report's `limited`. The 429 itself is a request like any
   * other refusal, which `record` counts when it is answered.
   */
  limited(tenantId: string, kind: 'rate' | 'quota'): void {
    this.countsOf(tenantId)[kind === 'rate' ? LIMITED_RATE : LIMITED_QUOTA]!++
  }

  /** Today's pending counts of a tenant (see FORWARDED), made on its first request of the day. */
  private countsOf(tenantId: string): number[] {
    const day = this.today()
    let tenants = this.counts.get(day)
    if (tenants === undefined) {
      tenants = new Map()
      this.counts.set(day, tenants)
    }
    let counts = tenants.get(tenantId)
    if (counts === undefined) {
      // A literal: packed small integers, as the four counts were before.
      counts = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
      tenants.set(tenantId, counts)
    }
    this.pendingSince ??= this.now()
    return counts
  }

  /** Today's pending counts of a key acting as a tenant (made after countsOf, so pendingSince is set). */
  private keyCountsOf(tenantId: string, keyId: string): number[] {
    const day = this.today()
    let tenants = this.keyCounts.get(day)
    if (tenants === undefined) {
      tenants = new Map()
      this.keyCounts.set(day, tenants)
    }
    let keys = tenants.get(tenantId)
    if (keys === undefined) {
      keys = new Map()
      tenants.set(tenantId, keys)
    }
    let counts = keys.get(keyId)
    if (counts === undefined) {
      counts = [0, 0, 0, 0]
      keys.set(keyId, counts)
    }
    return counts
  }

  /** How long the oldest count not yet in Postgres has waited, in ms; 0 when none is pending. */
  lagMs(): number {
    const since = this.inDoubt?.since ?? this.pendingSince
    return since === null ? 0 : this.now() - since
  }

  private today(): string {
    const now = this.now()
    if (now < this.day.startMs || now >= this.day.endMs) {
      const startMs = now - (now % DAY_MS)
      this.day = { text: utcDay(now), startMs, endMs: startMs + DAY_MS }
    }
    return this.day.text
  }

  keyUsed(keyId: string): void {
    const now = this.now()
    const written = this.keyWrittenAt.get(keyId)
    if (written !== undefined && now - written < LAST_USED_RESOLUTION_MS) return
    this.keyWrittenAt.set(keyId, now)
    this.keyUses.set(keyId, now)
  }

  /** Writes what is pending; concurrent calls share one flush. What fails is kept for the next. */
  flush(): Promise<void> {
    if (this.flushing !== null) return this.flushing.then(() => this.flush())
    this.flushing = this.write().finally(() => {
      this.flushing = null
    })
    return this.flushing
  }

  private async write(): Promise<void> {
    const keyUses = this.keyUses
    this.keyUses = new Map()
    this.forgetOldKeyWrites()

    // A batch whose outcome is unknown goes again, as it was, before anything newer: its id keeps
    // a retry of a flush that did commit from adding its counts twice. Until it is through, new
    // counts keep adding up in memory (one batch in doubt at a time, however long Postgres is away).
    const clear = this.inDoubt === null || (await this.send(this.inDoubt))
    if (clear) this.inDoubt = null
    if (clear && this.pendingSince !== null) {
      const batch: Batch = {
        id: randomUUID(),
        rows: toRows(this.counts),
        keyRows: toKeyRows(this.keyCounts),
        since: this.pendingSince,
      }
      this.counts = new Map()
      this.keyCounts = new Map()
      this.pendingSince = null
      if (!(await this.send(batch))) this.inDoubt = batch
    }
    if (keyUses.size > 0) {
      try {
        await touchKeys(
          this.options.sql,
          [...keyUses].map(([keyId, at]) => ({ keyId, at: new Date(at) })),
        )
      } catch (err) {
        this.options.log.warn({ err, keys: keyUses.size }, 'last_used_at flush failed; will retry')
        this.options.onFlushFailed?.()
        for (const [keyId, at] of keyUses) if (!this.keyUses.has(keyId)) this.keyUses.set(keyId, at)
      }
    }
  }

  /** The once-a-minute memory only needs the last minute. */
  private forgetOldKeyWrites(): void {
    const cutoff = this.now() - LAST_USED_RESOLUTION_MS
    for (const [keyId, at] of this.keyWrittenAt) if (at <= cutoff) this.keyWrittenAt.delete(keyId)
  }

  /** Adds one batch to Postgres; false when that failed (it may or may not have committed). */
  private async send(batch: Batch): Promise<boolean> {
    try {
      await addUsage(this.options.sql, batch.id, batch.rows, batch.keyRows)
      return true
    } catch (err) {
      this.options.log.warn({ err, rows: batch.rows.length, batch: batch.id }, 'usage flush failed; will retry')
      this.options.onFlushFailed?.()
      return false
    }
  }

  /** Stops the timer and writes what is left. */
  async close(): Promise<void> {
    if (this.timer !== null) clearInterval(this.timer)
    this.timer = null
    await this.flush()
  }
}

type PendingCounts = Map<string, Map<string, number[]>>
type PendingKeyCounts = Map<string, Map<string, Map<string, number[]>>>

/** The pending counts by key as rows, in the order of usage_daily_keys' key (no deadlock between replicas). */
function toKeyRows(counts: PendingKeyCounts): KeyUsageCount[] {
  const rows: KeyUsageCount[] = []
  for (const [day, tenants] of counts) {
    for (const [tenantId, keys] of tenants) {
      for (const [keyId, c] of keys) {
        for (let index = 0; index < c.length; index++) {
          if (c[index]! > 0) rows.push({ tenantId, keyId, day, statusClass: index + 2, requests: c[index]! })
        }
      }
    }
  }
  const key = (r: KeyUsageCount) => `${r.tenantId} ${r.day} ${r.keyId} ${r.statusClass}`
  return rows.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0))
}

/** The pending counts as rows, in one fixed order (tenant, day, class) so that replicas' upserts cannot deadlock. */
function toRows(counts: PendingCounts): UsageCount[] {
  const rows: UsageCount[] = []
  for (const [day, tenants] of counts) {
    for (const [tenantId, c] of tenants) {
      for (let index = 0; index < FORWARDED; index++) {
        const statusClass = index + 2
        // Limit refusals are 429s: they ride on the 4xx row.
        const limitedRate = statusClass === 4 ? c[LIMITED_RATE]! : 0
        const limitedQuota = statusClass === 4 ? c[LIMITED_QUOTA]! : 0
        const requests = c[index]!
        const forwarded = c[FORWARDED + index]!
        if (requests + limitedRate + limitedQuota > 0)
          rows.push({ tenantId, day, statusClass, requests, forwarded, limitedRate, limitedQuota })
      }
    }
  }
  const order = (a: UsageCount, b: UsageCount) =>
    a.tenantId < b.tenantId
      ? -1
      : a.tenantId > b.tenantId
        ? 1
        : a.day < b.day
          ? -1
          : a.day > b.day
            ? 1
            : a.statusClass - b.statusClass
  return rows.sort(order)
}
