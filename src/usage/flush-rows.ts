// The meter's pending counts (usage/meter.ts) as the rows one flush writes (store/usage.ts): by
// tenant and day, by key and day, units by tenant and period, units by key and day. Each set is
// sorted by its table's key, so that two replicas flushing at once lock rows in the same order.
import type { KeyUnitCount, KeyUsageCount, LogDropCount, PeriodUnitCount, UsageCount } from '../store/usage-batch.js'

const DAY_MS = 86_400_000
/** The built-in meter that a route's `cost` weighs: request units. */
export const REQUESTS_METER = 'requests'

// A tenant's pending counts of one period, in one array: requests of the classes 2xx to 5xx, then
// those of them that were forwarded upstream, then the 429s of a rate limit and of a quota, then
// the request units of the forwarded ones (each counts its route's cost), and of those units the
// ones a limit charged and the ones under no limit (reconciliation's limiter count).
export const FORWARDED = 4
export const LIMITED_RATE = 8
export const LIMITED_QUOTA = 9
export const REQUEST_UNITS = 10
export const CHARGED_UNITS = 11
export const UNLIMITED_UNITS = 12
// A key's pending counts of one period: requests of the classes 2xx to 5xx, then request units.
export const KEY_REQUEST_UNITS = 4

/** `YYYY-MM-DD` of a UTC instant. */
export function utcDay(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10)
}

export type PendingCounts = Map<number, Map<string, number[]>>
export type PendingKeyCounts = Map<number, Map<string, Map<string, number[]>>>
export type PendingMeterUnits = Map<number, Map<string, Map<string, number[]>>>
export type PendingKeyMeterUnits = Map<number, Map<string, Map<string, Map<string, number>>>>
/** Units of dropped request log records: period start → tenant id → meter → units. */
export type PendingLogDrops = Map<number, Map<string, Map<string, number>>>

/** `YYYY-MM-DD` of a period start. */
const dayOf = (periodStartMs: number) => utcDay(periodStartMs - (periodStartMs % DAY_MS))

/** Rows in one fixed order (their table's key) so that replicas' upserts cannot deadlock. */
function sorted<T>(rows: T[], key: (row: T) => string): T[] {
  return rows.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0))
}

/**
 * The pending counts by key as rows of usage_daily_keys: periods of a day add up (one row per
 * key, in one statement, may be updated once only).
 */
export function toKeyRows(counts: PendingKeyCounts): KeyUsageCount[] {
  const rows = new Map<string, KeyUsageCount>()
  for (const [period, tenants] of counts) {
    const day = dayOf(period)
    for (const [tenantId, keys] of tenants) {
      for (const [keyId, c] of keys) {
        for (let index = 0; index < KEY_REQUEST_UNITS; index++) {
          if (c[index]! === 0) continue
          const statusClass = index + 2
          const name = `${tenantId} ${day} ${keyId} ${statusClass}`
          const row = rows.get(name)
          if (row === undefined) rows.set(name, { tenantId, keyId, day, statusClass, requests: c[index]! })
          else row.requests += c[index]!
        }
      }
    }
  }
  return sorted([...rows.values()], (r) => `${r.tenantId} ${r.day} ${r.keyId} ${r.statusClass}`)
}

/** The pending counts as rows of usage_daily, periods of a day added up. */
export function toRows(counts: PendingCounts): UsageCount[] {
  const rows = new Map<string, Required<UsageCount>>()
  for (const [period, tenants] of counts) {
    const day = dayOf(period)
    for (const [tenantId, c] of tenants) {
      for (let index = 0; index < FORWARDED; index++) {
        const statusClass = index + 2
        // Limit refusals are 429s: they ride on the 4xx row.
        const limitedRate = statusClass === 4 ? c[LIMITED_RATE]! : 0
        const limitedQuota = statusClass === 4 ? c[LIMITED_QUOTA]! : 0
        const requests = c[index]!
        const forwarded = c[FORWARDED + index]!
        if (requests + limitedRate + limitedQuota === 0) continue
        const name = `${tenantId} ${day} ${statusClass}`
        const row = rows.get(name)
        if (row === undefined)
          rows.set(name, { tenantId, day, statusClass, requests, forwarded, limitedRate, limitedQuota })
        else {
          row.requests += requests
          row.forwarded += forwarded
          row.limitedRate += limitedRate
          row.limitedQuota += limitedQuota
        }
      }
    }
  }
  return sorted([...rows.values()], (r) => `${r.tenantId} ${r.day} ${r.statusClass}`)
}

/** Units by tenant, period and meter: the `requests` meter from the counts, the reported ones beside. */
export function toUnitRows(counts: PendingCounts, reported: PendingMeterUnits): PeriodUnitCount[] {
  const rows: PeriodUnitCount[] = []
  for (const [period, tenants] of counts) {
    const periodStart = new Date(period).toISOString()
    for (const [tenantId, c] of tenants) {
      const requests = c[FORWARDED]! + c[FORWARDED + 1]! + c[FORWARDED + 2]! + c[FORWARDED + 3]!
      if (requests > 0)
        rows.push({
          tenantId,
          periodStart,
          meter: REQUESTS_METER,
          units: c[REQUEST_UNITS]!,
          requests,
          charged: c[CHARGED_UNITS]!,
          unlimited: c[UNLIMITED_UNITS]!,
        })
    }
  }
  // A reported meter's units, with those its limits charged and those under none (meter.ts).
  for (const [period, tenants] of reported) {
    const periodStart = new Date(period).toISOString()
    for (const [tenantId, meters] of tenants) {
      for (const [meter, [units, requests, charged, unlimited]] of meters)
        rows.push({
          tenantId,
          periodStart,
          meter,
          units: units!,
          requests: requests!,
          charged: charged!,
          unlimited: unlimited!,
        })
    }
  }
  return sorted(rows, (r) => `${r.tenantId} ${r.periodStart} ${r.meter}`)
}

/** Units by key, day and meter, periods of a day added up. */
export function toKeyUnitRows(counts: PendingKeyCounts, reported: PendingKeyMeterUnits): KeyUnitCount[] {
  const rows = new Map<string, KeyUnitCount>()
  const add = (tenantId: string, day: string, keyId: string, meter: string, units: number) => {
    const name = `${tenantId} ${day} ${keyId} ${meter}`
    const row = rows.get(name)
    if (row === undefined) rows.set(name, { tenantId, day, keyId, meter, units })
    else row.units += units
  }
  for (const [period, tenants] of counts) {
    const day = dayOf(period)
    for (const [tenantId, keys] of tenants) {
      for (const [keyId, c] of keys)
        if (c[KEY_REQUEST_UNITS]! > 0) add(tenantId, day, keyId, REQUESTS_METER, c[KEY_REQUEST_UNITS]!)
    }
  }
  for (const [period, tenants] of reported) {
    const day = dayOf(period)
    for (const [tenantId, keys] of tenants) {
      for (const [keyId, meters] of keys) for (const [meter, units] of meters) add(tenantId, day, keyId, meter, units)
    }
  }
  return sorted([...rows.values()], (r) => `${r.tenantId} ${r.day} ${r.keyId} ${r.meter}`)
}

/** Units of dropped request log records, by tenant, period and meter. */
export function toLogDropRows(drops: PendingLogDrops): LogDropCount[] {
  const rows: LogDropCount[] = []
  for (const [period, tenants] of drops) {
    const periodStart = new Date(period).toISOString()
    for (const [tenantId, meters] of tenants)
      for (const [meter, units] of meters) rows.push({ tenantId, periodStart, meter, units })
  }
  return sorted(rows, (r) => `${r.tenantId} ${r.periodStart} ${r.meter}`)
}
