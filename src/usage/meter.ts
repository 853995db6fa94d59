// Counts requests per tenant, period (an hour by default) and status class in memory, and the
// units they counted for (docs/api.md, Units), and adds them to Postgres about once a second, in
// one statement, and at shutdown (docs/api.md, usage; docs/internals.md). Keys' last_used_at
// rides on the same flush, at most once a minute per key: nothing is written on the request path.
// Every write has a deadline, on a connection of the meter's own that a write past it ends: a
// Postgres that stops answering (a lock, a primary gone without a reset) fails the flush, which
// keeps its batch in doubt, and a stop waits for it no longer than CLOSE_TIMEOUT_MS.
import { randomUUID } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import type { Sql } from '../store/db.js'
import { forgetReplica } from '../store/usage-periods.js'
import {
  addUsage,
  type FlushMark,
  type KeyUnitCount,
  type KeyUsageCount,
  type LogDropCount,
  type PeriodUnitCount,
  touchKeys,
  type UsageCount,
} from '../store/usage.js'
import {
  CHARGED_UNITS,
  FORWARDED,
  KEY_REQUEST_UNITS,
  LIMITED_QUOTA,
  LIMITED_RATE,
  type PendingCounts,
  type PendingKeyCounts,
  type PendingKeyMeterUnits,
  type PendingLogDrops,
  type PendingMeterUnits,
  REQUEST_UNITS,
  REQUESTS_METER,
  toKeyRows,
  toKeyUnitRows,
  toLogDropRows,
  toRows,
  toUnitRows,
  UNLIMITED_UNITS,
} from './flush-rows.js'
import { CLOSE_TIMEOUT_MS, MeterWrites } from './meter-writes.js'

export { REQUESTS_METER, utcDay } from './flush-rows.js'

export const FLUSH_INTERVAL_MS = 1_000
export const LAST_USED_RESOLUTION_MS = 60_000
/** The usage period's default length: an hour (USAGE_PERIOD_SECONDS). */
export const DEFAULT_PERIOD_SECONDS = 3_600
/** The pause between two of the stop's tries on a fresh connection. */
const CLOSE_RETRY_PAUSE_MS = 200

/**
 * Units an upstream reported for one answer, by meter name (proxy/meter-reports.ts): a Map, which
 * the meter walks; the limits ask only `get` of it (limits/types.ts, ReportedUnits).
 */
export type ReportedUnitsMap = ReadonlyMap<string, number>

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
}

interface Batch {
  readonly id: string
  readonly rows: readonly UsageCount[]
  /** The same requests by calling key (usage by key), written in the same statement. */
  readonly keyRows: readonly KeyUsageCount[]
  /** Units by tenant, period and meter, and by key, day and meter: the same statement again. */
  readonly unitRows: readonly PeriodUnitCount[]
  readonly keyUnitRows: readonly KeyUnitCount[]
  /** Units of dropped request log records (usage_period_checks): the same statement again. */
  readonly logDropRows: readonly LogDropCount[]
  /** When its oldest count was recorded. */
  readonly since: number
  /** Everything counted before `through` is in this batch or an earlier one (usage_flush_marks). */
  readonly mark: FlushMark
}

export class UsageMeter {
  /**
   * Requests not yet in Postgres: period start (ms) → tenant id → counts (FORWARDED above). Keyed
   * by what the request already holds (the period is cached, the id is the tenant record's), so
   * counting one builds no string.
   */
  private counts: PendingCounts = new Map()
  /** The same requests by key: period start → tenant id → key id → counts (KEY_REQUEST_UNITS above). */
  private keyCounts: PendingKeyCounts = new Map()
  /** Units upstreams reported: period start → tenant id → meter → [units, requests that reported]. */
  private meterUnits: PendingMeterUnits = new Map()
  /** The same by key: period start → tenant id → key id → meter → units. */
  private keyMeterUnits: PendingKeyMeterUnits = new Map()
  /** Units of forwarded requests whose request log records were dropped, by the period they ended in. */
  private logDrops: PendingLogDrops = new Map()
  /** When the oldest of `counts` was recorded; null while nothing is pending. */
  private pendingSince: number | null = null
  /** A flush that failed: it may have committed, so it is retried with the same id. */
  private inDoubt: Batch | null = null
  /** keyId → last use not yet written. */
  private keyUses = new Map<string, number>()
  /** keyId → when its last_used_at was last written (or queued), for the once-a-minute rule. */
  private readonly keyWrittenAt = new Map<string, number>()
  /** The current period's bounds, so that a request computes none. */
  private period = { startMs: 0, endMs: 0 }
  private readonly periodMs: number
  private timer: NodeJS.Timeout | null = null
  private flushing: Promise<void> | null = null
  private readonly now: () => number
  /** Writes that failed since the last that went through (0: the last went through): the first is logged, the rest counted. */
  private failedInARow = 0
  /** Where and how long its writes run (meter-writes.ts). */
  private readonly writes: MeterWrites
  /** This meter's name among the replicas' flush marks. */
  readonly replicaId = randomUUID()

  private readonly options: MeterOptions
  constructor(options: MeterOptions) {
    this.options = options
    this.now = options.now ?? Date.now
    this.periodMs = (options.periodSeconds ?? DEFAULT_PERIOD_SECONDS) * 1000
    this.writes = new MeterWrites(options)
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
    // A WebSocket's 101 is its upgrade's success: counted with the 2xx (docs/api.md, WebSockets).
    const statusClass = statusCode === 101 ? 2 : Math.floor(statusCode / 100)
    if (statusClass < 2 || statusClass > 5) return
    const counts = this.countsOf(tenantId)
    counts[statusClass - 2]!++
    if (forwarded) {
      counts[FORWARDED + statusClass - 2]!++
      counts[REQUEST_UNITS]! += cost
      if (charged === true) counts[CHARGED_UNITS]! += cost
      else if (charged === null) counts[UNLIMITED_UNITS]! += cost
    }
    if (keyId !== undefined) {
      const keyCounts = this.keyCountsOf(tenantId, keyId)
      keyCounts[statusClass - 2]!++
      if (forwarded) keyCounts[KEY_REQUEST_UNITS]! += cost
    }
    if (forwarded && reported !== null) this.addReported(tenantId, keyId, reported, meterCharged)
  }

  /** An upstream's report of units, by tenant and by key (made after countsOf: the period is current). */
  private addReported(
    tenantId: string,
    keyId: string | undefined,
    reported: ReportedUnitsMap,
    meterCharged: ((meter: string) => boolean | null) | null,
  ): void {
    const byMeter = child(child(this.meterUnits, this.period.startMs), tenantId)
    const byKeyMeter =
      keyId === undefined ? null : child(child(child(this.keyMeterUnits, this.period.startMs), tenantId), keyId)
    for (const [meter, units] of reported) {
      // Units, requests, units its limits charged, units under none of its limits.
      let sums = byMeter.get(meter) as number[] | undefined
      if (sums === undefined) {
        sums = [0, 0, 0, 0]
        byMeter.set(meter, sums)
      }
      sums[0]! += units
      sums[1]!++
      const charged = meterCharged === null ? null : meterCharged(meter)
      if (charged === true) sums[2]! += units
      else if (charged === null) sums[3]! += units
      if (byKeyMeter !== null) byKeyMeter.set(meter, ((byKeyMeter.get(meter) as number | undefined) ?? 0) + units)
    }
  }

  /**
   * A request the gateway refused with 429 for a rate limit or a monthly quota, for the tenant it
   * acted as: counted apart, for the usage report's `limited`. The 429 itself is a request like any
   * other refusal, which `record` counts when it is answered.
   */
  limited(tenantId: string, kind: 'rate' | 'quota'): void {
    this.countsOf(tenantId)[kind === 'rate' ? LIMITED_RATE : LIMITED_QUOTA]!++
  }

  /**
   * A forwarded request's request log record that was dropped (the log's buffer was full): its
   * units, by the period its answer ended in, for reconciliation's `log_dropped`. `unitsJson`: the
   * units its upstream reported, as the record holds them.
   */
  logDropped(tenantId: string, endedAtMs: number, cost: number, unitsJson: string | null): void {
    const period = endedAtMs - (endedAtMs % this.periodMs)
    const byMeter = child(child(this.logDrops, period), tenantId)
    byMeter.set(REQUESTS_METER, (byMeter.get(REQUESTS_METER) ?? 0) + cost)
    if (unitsJson !== null)
      for (const [meter, units] of Object.entries(JSON.parse(unitsJson) as Record<string, number>))
        byMeter.set(meter, (byMeter.get(meter) ?? 0) + units)
    this.pendingSince ??= this.now()
  }

  /** The period's pending counts of a tenant (see FORWARDED), made on its first request of the period. */
  private countsOf(tenantId: string): number[] {
    const period = this.currentPeriod()
    let tenants = this.counts.get(period)
    if (tenants === undefined) {
      tenants = new Map()
      this.counts.set(period, tenants)
    }
    let counts = tenants.get(tenantId)
    if (counts === undefined) {
      // A literal: packed small integers, as the four counts were before.
      counts = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
      tenants.set(tenantId, counts)
    }
    this.pendingSince ??= this.now()
    return counts
  }

  /** The period's pending counts of a key acting as a tenant (made after countsOf: the period is current). */
  private keyCountsOf(tenantId: string, keyId: string): number[] {
    const period = this.period.startMs
    let tenants = this.keyCounts.get(period)
    if (tenants === undefined) {
      tenants = new Map()
      this.keyCounts.set(period, tenants)
    }
    let keys = tenants.get(tenantId)
    if (keys === undefined) {
      keys = new Map()
      tenants.set(tenantId, keys)
    }
    let counts = keys.get(keyId)
    if (counts === undefined) {
      counts = [0, 0, 0, 0, 0]
      keys.set(keyId, counts)
    }
    return counts
  }

  /** How long the oldest count not yet in Postgres has waited, in ms; 0 when none is pending. */
  lagMs(): number {
    const since = this.inDoubt?.since ?? this.pendingSince
    return since === null ? 0 : this.now() - since
  }

  /** The start (ms) of the period under way. */
  private currentPeriod(): number {
    const now = this.now()
    if (now < this.period.startMs || now >= this.period.endMs) {
      const startMs = now - (now % this.periodMs)
      this.period = { startMs, endMs: startMs + this.periodMs }
    }
    return this.period.startMs
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
    let through = this.inDoubt === null || (await this.send(this.inDoubt))
    if (through) {
      this.inDoubt = null
      // Everything counted so far is in this batch: the mark that lets periods close (docs/billing.md).
      // With nothing counted, the mark goes alone, and is not kept in doubt: the next one supersedes it.
      const empty = this.pendingSince === null
      const mark = { replicaId: this.replicaId, through: new Date(this.now()) }
      const batch: Batch = {
        id: randomUUID(),
        mark,
        rows: toRows(this.counts),
        keyRows: toKeyRows(this.keyCounts),
        unitRows: toUnitRows(this.counts, this.meterUnits),
        keyUnitRows: toKeyUnitRows(this.keyCounts, this.keyMeterUnits),
        logDropRows: toLogDropRows(this.logDrops),
        since: this.pendingSince ?? this.now(),
      }
      this.counts = new Map()
      this.keyCounts = new Map()
      this.meterUnits = new Map()
      this.keyMeterUnits = new Map()
      this.logDrops = new Map()
      this.pendingSince = null
      // In doubt from the moment it is sent (its age is the lag; a stop that gives up counts it),
      // until Postgres says it is in.
      if (!empty) this.inDoubt = batch
      through = await this.send(batch)
      if (through) this.inDoubt = null
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

  /** Adds one batch to Postgres; false when that failed (it may or may not have committed). */
  private async send(batch: Batch): Promise<boolean> {
    try {
      await this.writes.run((sql) =>
        addUsage(sql, batch.id, {
          counts: batch.rows,
          keyCounts: batch.keyRows,
          unitCounts: batch.unitRows,
          keyUnitCounts: batch.keyUnitRows,
          logDropCounts: batch.logDropRows,
          mark: batch.mark,
        }),
      )
      if (this.failedInARow > 0)
        this.options.log.info(
          { failures: this.failedInARow, batch: batch.id },
          'usage flush went through again; the counts kept meanwhile are in',
        )
      this.failedInARow = 0
      return true
    } catch (err) {
      // Once per outage: every failure is counted (tgw_usage_flush_failures_total), and the lag
      // (tgw_usage_flush_lag_seconds) says how long it has lasted.
      if (this.failedInARow++ === 0)
        this.options.log.warn(
          { err, rows: batch.rows.length, batch: batch.id },
          'usage flush failed; the counts are kept and retried every second with the same batch id',
        )
      this.options.onFlushFailed?.()
      return false
    }
  }

  /** What Postgres has not taken: the batch in doubt and the counts pending, requests and units by meter. */
  private unwritten(): { requests: number; units: Record<string, number> } {
    const rows = [...(this.inDoubt?.rows ?? []), ...toRows(this.counts)]
    const unitRows = [...(this.inDoubt?.unitRows ?? []), ...toUnitRows(this.counts, this.meterUnits)]
    const units: Record<string, number> = {}
    for (const row of unitRows) units[row.meter] = (units[row.meter] ?? 0) + row.units
    return { requests: rows.reduce((sum, row) => sum + row.requests, 0), units }
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
    try {
      // A flush under way has taken its counts already: waited for (its write ends by its own
      // deadline, or this one), then what is left is written.
      await this.flushing
      for (;;) {
        if (this.pendingSince !== null || this.inDoubt !== null || this.keyUses.size > 0 || this.failedInARow > 0)
          await this.flush()
        if (this.inDoubt === null && this.pendingSince === null && this.failedInARow === 0) break
        if (stopBy - performance.now() <= CLOSE_RETRY_PAUSE_MS) break
        await new Promise((resolve) => setTimeout(resolve, CLOSE_RETRY_PAUSE_MS))
      }
      if (this.inDoubt !== null || this.pendingSince !== null) {
        const { requests, units } = this.unwritten()
        this.options.log.error(
          { requests, units, batch: this.inDoubt?.id, closeTimeoutMs },
          'usage: Postgres did not take the last counts before the stop; they are lost (unless the last try commits late), and the periods they belong to will record this replica as lost after 120 s',
        )
        return
      }
      if (this.failedInARow > 0) return
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

/** The map under `key` in `parent`, made empty when missing. */
function child<K, V extends Map<unknown, unknown>>(parent: Map<K, V>, key: K): V {
  let found = parent.get(key)
  if (found === undefined) {
    found = new Map() as V
    parent.set(key, found)
  }
  return found
}
