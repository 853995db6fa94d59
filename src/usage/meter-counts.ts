// The usage meter's counting (usage/meter.ts): requests, request units and reported units by
// period, tenant, key and meter, in memory until a flush takes them (usage/meter-flush.ts writes
// them). Nothing here does I/O; a request's count is a few array and Map updates.
//
// Every sum saturates at USAGE_COUNT_MAX (docs/billing.md, Bounds): the store's rows do too, so
// that no count, however many reports of 10^12 a tenant sends, can overflow a row and stop a flush.
import { USAGE_COUNT_MAX } from '../store/usage-batch.js'
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
import type { BatchRows } from './meter-flush.js'

/**
 * Units an upstream reported for one answer, by meter name (proxy/meter-reports.ts): a Map, which
 * the meter walks; the limits ask only `get` of it (limits/types.ts, ReportedUnits).
 */
export type ReportedUnitsMap = ReadonlyMap<string, number>

/** `a + b`, at most USAGE_COUNT_MAX (both non-negative). */
export function saturatingAdd(a: number, b: number): number {
  const sum = a + b
  return sum > USAGE_COUNT_MAX ? USAGE_COUNT_MAX : sum
}

/** The counts not yet taken by a flush (see UsageMeter.record for what each argument means). */
export class PendingUsage {
  /**
   * Requests: period start (ms) → tenant id → counts (flush-rows.ts, FORWARDED). Keyed by what the
   * request already holds (the period is cached, the id is the tenant record's), so counting one
   * builds no string.
   */
  private counts: PendingCounts = new Map()
  /** The same requests by key: period start → tenant id → key id → counts (KEY_REQUEST_UNITS). */
  private keyCounts: PendingKeyCounts = new Map()
  /** Units upstreams reported: period start → tenant id → meter → [units, requests that reported, charged, unlimited]. */
  private meterUnits: PendingMeterUnits = new Map()
  /** The same by key: period start → tenant id → key id → meter → units. */
  private keyMeterUnits: PendingKeyMeterUnits = new Map()
  /** Units of forwarded requests whose request log records were dropped, by the period they ended in. */
  private logDrops: PendingLogDrops = new Map()
  /** When the oldest pending count was recorded; null while nothing is pending. */
  private pendingSince: number | null = null
  /** The current period's bounds, so that a request computes none. */
  private period = { startMs: 0, endMs: 0 }
  private readonly periodMs: number
  private readonly now: () => number

  constructor(periodMs: number, now: () => number) {
    this.periodMs = periodMs
    this.now = now
  }

  /** When the oldest pending count was recorded (ms); null while nothing is pending. */
  get since(): number | null {
    return this.pendingSince
  }

  /** One answered request (UsageMeter.record). */
  record(
    tenantId: string,
    statusCode: number,
    forwarded: boolean,
    keyId: string | undefined,
    cost: number,
    reported: ReportedUnitsMap | null,
    charged: boolean | null,
    meterCharged: ((meter: string) => boolean | null) | null,
  ): void {
    // A WebSocket's 101 is its upgrade's success: counted with the 2xx (docs/api.md, WebSockets).
    const statusClass = statusCode === 101 ? 2 : Math.floor(statusCode / 100)
    if (statusClass < 2 || statusClass > 5) return
    const counts = this.countsOf(tenantId)
    counts[statusClass - 2]!++
    if (forwarded) {
      counts[FORWARDED + statusClass - 2]!++
      // A cost is at most 10^6: 9·10^9 requests a second before these could reach the bound.
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
      // Units, requests, units its limits charged, units under none of its limits. A report is
      // at most 10^12: 9,007 of them in a flush reach the bound, so units saturate.
      let sums = byMeter.get(meter)
      if (sums === undefined) {
        sums = [0, 0, 0, 0]
        byMeter.set(meter, sums)
      }
      sums[0] = saturatingAdd(sums[0]!, units)
      sums[1]!++
      const charged = meterCharged === null ? null : meterCharged(meter)
      if (charged === true) sums[2] = saturatingAdd(sums[2]!, units)
      else if (charged === null) sums[3] = saturatingAdd(sums[3]!, units)
      if (byKeyMeter !== null) byKeyMeter.set(meter, saturatingAdd(byKeyMeter.get(meter) ?? 0, units))
    }
  }

  /** A 429 of a rate limit or a monthly quota (UsageMeter.limited). */
  limited(tenantId: string, kind: 'rate' | 'quota'): void {
    this.countsOf(tenantId)[kind === 'rate' ? LIMITED_RATE : LIMITED_QUOTA]!++
  }

  /** A dropped request log record's units (UsageMeter.logDropped). */
  logDropped(tenantId: string, endedAtMs: number, cost: number, unitsJson: string | null): void {
    const period = endedAtMs - (endedAtMs % this.periodMs)
    const byMeter = child(child(this.logDrops, period), tenantId)
    byMeter.set(REQUESTS_METER, saturatingAdd(byMeter.get(REQUESTS_METER) ?? 0, cost))
    // The record's own JSON: its names become Map keys, never properties looked up (a meter may
    // be called `constructor`).
    if (unitsJson !== null)
      for (const [meter, units] of Object.entries(JSON.parse(unitsJson) as Record<string, number>))
        byMeter.set(meter, saturatingAdd(byMeter.get(meter) ?? 0, units))
    this.pendingSince ??= this.now()
  }

  /** Everything pending as the rows of one flush, which starts the pending counts over. */
  take(): BatchRows {
    const rows: BatchRows = {
      rows: toRows(this.counts),
      keyRows: toKeyRows(this.keyCounts),
      unitRows: toUnitRows(this.counts, this.meterUnits),
      keyUnitRows: toKeyUnitRows(this.keyCounts, this.keyMeterUnits),
      logDropRows: toLogDropRows(this.logDrops),
    }
    this.counts = new Map()
    this.keyCounts = new Map()
    this.meterUnits = new Map()
    this.keyMeterUnits = new Map()
    this.logDrops = new Map()
    this.pendingSince = null
    return rows
  }

  /** The pending requests, and units by meter (Map: a meter's name is data), without taking them. */
  peek(): Pick<BatchRows, 'rows' | 'unitRows'> {
    return { rows: toRows(this.counts), unitRows: toUnitRows(this.counts, this.meterUnits) }
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
    const keys = child(child(this.keyCounts, this.period.startMs), tenantId)
    let counts = keys.get(keyId)
    if (counts === undefined) {
      counts = [0, 0, 0, 0, 0]
      keys.set(keyId, counts)
    }
    return counts
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
