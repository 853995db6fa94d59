// The usage meter (docs/api.md, usage; docs/internals.md): counts requests per tenant, period (an
// hour by default) and status class in memory, and the units they counted for (docs/api.md,
// Units), and adds them to Postgres about once a second, in one statement, and at shutdown. Keys'
// last_used_at rides on the same flush, at most once a minute per key: nothing is written on the
// request path. The counting is usage/meter-counts.ts, the batches and their retries
// usage/meter-flush.ts, where and how long a write runs usage/meter-writes.ts: every write has a
// deadline, on a connection of the meter's own that a write past it ends, so a Postgres that stops
// answering fails the flush, which keeps its batch in doubt, and a stop waits for it no longer
// than CLOSE_TIMEOUT_MS.
import { randomUUID } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import type { Sql } from '../store/db.js'
import { forgetReplica } from '../store/usage-periods.js'
import { touchKeys } from '../store/usage.js'
import { PendingUsage, type ReportedUnitsMap, saturatingAdd } from './meter-counts.js'
import { type Batch, MeterFlush } from './meter-flush.js'
import { CLOSE_TIMEOUT_MS, MeterWrites } from './meter-writes.js'

export { REQUESTS_METER, utcDay } from './flush-rows.js'
export type { ReportedUnitsMap } from './meter-counts.js'

export const FLUSH_INTERVAL_MS = 1_000
export const LAST_USED_RESOLUTION_MS = 60_000
/** The usage period's default length: an hour (USAGE_PERIOD_SECONDS). */
export const DEFAULT_PERIOD_SECONDS = 3_600
/** The pause between two of the stop's tries on a fresh connection. */
const CLOSE_RETRY_PAUSE_MS = 200

export interface MeterOptions {
  sql: Sql
  log: FastifyBaseLogger
  /**
   * Opens a client of one connection of the meter's own (store/db.ts, openOwnConnection), with
   * these startup parameters: its writes go there, and a write past its deadline ends it. Without
   * it (the embedded PGlite), on `sql`, under the same deadline, with nothing ended.
   */
  openConnection?: ((parameters: Record<string, string>) => Sql) | undefined
  /** Postgres's limit on one write (WRITE_TIMEOUT_MS); the meter waits a second more. */
  writeTimeoutMs?: number | undefined
  /** How long close() may take at most (CLOSE_TIMEOUT_MS). */
  closeTimeoutMs?: number | undefined
  flushIntervalMs?: number
  /** The usage period's length in seconds, a divisor of a day (default an hour). */
  periodSeconds?: number
  now?: () => number
  /** Told of each flush that failed (a metric). */
  onFlushFailed?: () => void
  /** Told of each count Postgres refused for its data, which is dropped (a metric; usage/meter-flush.ts). */
  onRowRefused?: () => void
}

export class UsageMeter {
  /** The counts not yet taken by a flush. */
  private readonly counts: PendingUsage
  /** The batches taken and not yet written (in doubt, or halves of a refused one). */
  private readonly flushes: MeterFlush
  /** keyId → last use not yet written. */
  private keyUses = new Map<string, number>()
  /** keyId → when its last_used_at was last written (or queued), for the once-a-minute rule. */
  private readonly keyWrittenAt = new Map<string, number>()
  private timer: NodeJS.Timeout | null = null
  private flushing: Promise<void> | null = null
  /** The one flush that callers arriving while `flushing` runs wait for. */
  private nextFlush: Promise<void> | null = null
  private readonly now: () => number
  /** Where and how long its writes run (meter-writes.ts). */
  private readonly writes: MeterWrites
  /** This meter's name among the replicas' flush marks. */
  readonly replicaId = randomUUID()

  private readonly options: MeterOptions
  constructor(options: MeterOptions) {
    this.options = options
    this.now = options.now ?? Date.now
    this.counts = new PendingUsage((options.periodSeconds ?? DEFAULT_PERIOD_SECONDS) * 1000, this.now)
    this.writes = new MeterWrites(options)
    this.flushes = new MeterFlush({
      writes: this.writes,
      log: options.log,
      onFlushFailed: options.onFlushFailed,
      onRowRefused: options.onRowRefused,
    })
  }

  start(): void {
    if (this.timer !== null) return
    // A flush still under way at the next tick (Postgres slow or gone): the tick after it will do.
    // Chained, every tick of an outage would have queued one more flush behind it.
    this.timer = setInterval(() => {
      if (this.flushing === null) void this.flush()
    }, this.options.flushIntervalMs ?? FLUSH_INTERVAL_MS)
    this.timer.unref()
  }

  /**
   * One answered request, for the tenant it acted as. Statuses below 200 are not counted.
   * `forwarded`: it was sent on to an upstream, which is what a monthly quota counts (docs/api.md).
   * `keyId`: the key that made it, for the usage by key (the tenant's counts are kept either way).
   * A forwarded request counts `cost` request units, and the units its upstream `reported`.
   * `charged`: its limits took its cost (true), or it was under none (null); false, under limits
   * that took nothing, is never expected, and reconciliation shows it as unexplained.
   * `meterCharged`: the same of each reported meter's limits (limits in units), by meter name.
   */
  record(
    tenantId: string,
    statusCode: number,
    forwarded = false,
    keyId?: string,
    cost = 1,
    reported: ReportedUnitsMap | null = null,
    charged: boolean | null = null,
    meterCharged: ((meter: string) => boolean | null) | null = null,
  ): void {
    this.counts.record(tenantId, statusCode, forwarded, keyId, cost, reported, charged, meterCharged)
  }

  /**
   * A request the gateway refused with 429 for a rate limit or a monthly quota, for the tenant it
   * acted as: counted apart, for the usage report's `limited`. The 429 itself is a request like any
   * other refusal, which `record` counts when it is answered.
   */
  limited(tenantId: string, kind: 'rate' | 'quota'): void {
    this.counts.limited(tenantId, kind)
  }

  /**
   * A forwarded request's request log record that was dropped (the log's buffer was full): its
   * units, by the period its answer ended in, for reconciliation's `log_dropped`. `unitsJson`: the
   * units its upstream reported, as the record holds them.
   */
  logDropped(tenantId: string, endedAtMs: number, cost: number, unitsJson: string | null): void {
    this.counts.logDropped(tenantId, endedAtMs, cost, unitsJson)
  }

  /** How long the oldest count not yet in Postgres has waited, in ms; 0 when none is pending. */
  lagMs(): number {
    const since = this.flushes.since ?? this.counts.since
    return since === null ? 0 : this.now() - since
  }

  keyUsed(keyId: string): void {
    const now = this.now()
    const written = this.keyWrittenAt.get(keyId)
    if (written !== undefined && now - written < LAST_USED_RESOLUTION_MS) return
    this.keyWrittenAt.set(keyId, now)
    this.keyUses.set(keyId, now)
  }

  /**
   * Writes what is pending. Calls made while a flush runs share one flush after it, which writes
   * all they counted: a hundred callers (each quota's month read, at a month's start) are two
   * flushes, not a hundred in a row. What fails is kept for the next.
   */
  flush(): Promise<void> {
    if (this.flushing === null) {
      this.flushing = this.write().finally(() => {
        this.flushing = null
      })
      return this.flushing
    }
    const after = () => {
      this.nextFlush = null
      return this.flush()
    }
    this.nextFlush ??= this.flushing.then(after, after)
    return this.nextFlush
  }

  private async write(): Promise<void> {
    const keyUses = this.keyUses
    this.keyUses = new Map()
    this.forgetOldKeyWrites()

    // Batches not yet written go first, as they were. Until they are through, new counts keep
    // adding up in memory (one batch in doubt at a time, however long Postgres is away).
    let through = await this.flushes.write()
    if (through) {
      // Everything counted so far is in this batch: the mark that lets periods close (docs/billing.md).
      // With nothing counted, the mark goes alone, and is not kept in doubt: the next one supersedes it.
      const since = this.counts.since ?? this.now()
      const batch: Batch = {
        id: randomUUID(),
        mark: { replicaId: this.replicaId, through: new Date(this.now()) },
        since,
        ...this.counts.take(),
      }
      through = await this.flushes.write(batch)
    }
    // Postgres did not take the counts: the keys' last use waits for it too.
    if (keyUses.size > 0 && !through) this.keepKeyUses(keyUses)
    else if (keyUses.size > 0) {
      try {
        await this.writes.run((sql) =>
          touchKeys(
            sql,
            [...keyUses].map(([keyId, at]) => ({ keyId, at: new Date(at) })),
          ),
        )
      } catch (err) {
        this.options.log.warn({ err, keys: keyUses.size }, 'last_used_at flush failed; will retry')
        this.options.onFlushFailed?.()
        this.keepKeyUses(keyUses)
      }
    }
  }

  /** Key uses a write did not take, kept for the next (a newer use of a key wins). */
  private keepKeyUses(keyUses: Map<string, number>): void {
    for (const [keyId, at] of keyUses) if (!this.keyUses.has(keyId)) this.keyUses.set(keyId, at)
  }

  /** The once-a-minute memory only needs the last minute. */
  private forgetOldKeyWrites(): void {
    const cutoff = this.now() - LAST_USED_RESOLUTION_MS
    for (const [keyId, at] of this.keyWrittenAt) if (at <= cutoff) this.keyWrittenAt.delete(keyId)
  }

  /** What Postgres has not taken: the batches not written and the counts pending, requests and units by meter. */
  private unwritten(): { requests: number; units: Record<string, number> } {
    const batches = [...this.flushes.unwritten(), this.counts.peek()]
    // A Map, then an object made from it: a meter may be called `constructor` (names are data).
    const units = new Map<string, number>()
    let requests = 0
    for (const batch of batches) {
      for (const row of batch.rows) requests += row.requests
      for (const row of batch.unitRows) units.set(row.meter, saturatingAdd(units.get(row.meter) ?? 0, row.units))
    }
    return { requests, units: Object.fromEntries(units) }
  }

  /**
   * Stops the timer and writes what is left, within `closeTimeoutMs` (the write under way
   * included): a write that fails is tried again on a fresh connection until then. Once it is
   * in, periods stop waiting for this replica. If Postgres never takes it, what it could not write
   * is logged at error, and the replica's mark stays: the close records the loss once it has not
   * been heard from for 120 s (store/usage-periods.ts), as it does for a replica killed.
   */
  async close(): Promise<void> {
    if (this.timer !== null) clearInterval(this.timer)
    this.timer = null
    const closeTimeoutMs = this.options.closeTimeoutMs ?? CLOSE_TIMEOUT_MS
    const stopBy = performance.now() + closeTimeoutMs
    this.writes.stopBy = stopBy
    const flushes = this.flushes
    try {
      // A flush under way has taken its counts already: waited for (its write ends by its own
      // deadline, or this one), then what is left is written.
      await this.flushing
      for (;;) {
        if (this.counts.since !== null || flushes.pending || this.keyUses.size > 0 || flushes.failedInARow > 0)
          await this.flush()
        if (!flushes.pending && this.counts.since === null && flushes.failedInARow === 0) break
        if (stopBy - performance.now() <= CLOSE_RETRY_PAUSE_MS) break
        await new Promise((resolve) => setTimeout(resolve, CLOSE_RETRY_PAUSE_MS))
      }
      if (flushes.pending || this.counts.since !== null) {
        const { requests, units } = this.unwritten()
        this.options.log.error(
          { requests, units, batch: flushes.firstId, closeTimeoutMs },
          'usage: Postgres did not take the last counts before the stop; they are lost (unless the last try commits late), and the periods they belong to will record this replica as lost after 120 s',
        )
        return
      }
      if (flushes.failedInARow > 0) return
      await this.writes
        .run((sql) => forgetReplica(sql, this.replicaId))
        .catch((err: unknown) => {
          this.options.log.warn({ err }, 'usage flush mark not removed; periods wait for it until it ages out')
        })
    } finally {
      await this.writes.end()
    }
  }
}
