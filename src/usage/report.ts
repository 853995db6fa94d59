// The usage report of docs/api.md: the date range rules and the shape of an entry.
import { DATE_RULE, parseDate, parseDateTime, utcDate } from '../dates.js'
import { validationFailed, type FieldError } from '../errors.js'
import type { Sql, Tx } from '../store/db.js'
import {
  type KeyUnitRow,
  type KeyUsageRow,
  type UnitRow,
  unitRows,
  type UsageRow,
  usageRows,
} from '../store/usage-reads.js'
import type { KeyUsageEntry, Units, UsageEntry } from '../schemas/usage.js'
import { USAGE_COUNT_MAX } from '../store/usage-batch.js'
import { utcDay } from './meter.js'

export const MAX_RANGE_DAYS = 366
const DAY_MS = 86_400_000

/**
 * A UTC calendar date from `YYYY-MM-DD` or an RFC 3339 date-time (whose `+` offset arrives as a
 * space when the client did not encode it), else null: also when an offset carries it out of
 * 0001–9999 (dates.ts).
 */
export function parseReportDate(value: string): string | null {
  const date = parseDate(value)
  if (date !== null) return date
  const instant = parseDateTime(value.replace(/ (\d{2}:\d{2})$/, '+$1'))
  return instant === null ? null : utcDate(instant)
}

/** The range asked for, with the defaults of docs/api.md (this month so far) and limits. */
export function reportRange(query: { from?: string; to?: string }, nowMs: number): { from: string; to: string } {
  const today = utcDay(nowMs)
  const errors: FieldError[] = []
  const parse = (name: 'from' | 'to', fallback: string): string => {
    const given = query[name]
    if (given === undefined) return fallback
    const day = parseReportDate(given)
    if (day === null) errors.push({ path: `/querystring/${name}`, message: DATE_RULE })
    return day ?? fallback
  }
  const from = parse('from', `${today.slice(0, 8)}01`)
  const to = parse('to', today)
  if (errors.length > 0) throw validationFailed(errors)
  const days = (Date.parse(to) - Date.parse(from)) / DAY_MS + 1
  if (days < 1) throw validationFailed([{ path: '/querystring/from', message: `must not be after to (${to})` }])
  if (days > MAX_RANGE_DAYS) {
    throw validationFailed([{ path: '/querystring/to', message: `the range may span at most ${MAX_RANGE_DAYS} days` }])
  }
  return { from, to }
}

/** `range`: each day its total only (the default); `day`: each day also by status class and limits. */
export type Granularity = 'range' | 'day'

type Day = UsageEntry['days'][number]

/** Rows of one page (sorted by sub-account, then day) as report entries, each with its position. */
export function usageEntries(
  rows: readonly UsageRow[],
  granularity: Granularity = 'range',
  withName = false,
  units: readonly UnitRow[] = [],
): (UsageEntry & { seq: string })[] {
  const entries: (UsageEntry & { seq: string })[] = []
  for (const row of rows) {
    let entry = entries[entries.length - 1]
    if (entry === undefined || entry.seq !== row.seq) {
      entry = {
        seq: row.seq,
        sub_account_id: row.id,
        external_id: row.external_id,
        ...(withName ? { name: row.name } : {}),
        requests: 0,
        by_status: { '2xx': 0, '3xx': 0, '4xx': 0, '5xx': 0 },
        days: [],
        limited: { rate: 0, quota: 0 },
        units: { requests: 0 },
      }
      entries.push(entry)
    }
    const requests = Number(row.requests)
    const [rate, quota] = [Number(row.limited_rate), Number(row.limited_quota)]
    const statusClass = `${row.status_class}xx` as keyof UsageEntry['by_status']
    entry.requests += requests
    entry.by_status[statusClass] += requests
    entry.limited.rate += rate
    entry.limited.quota += quota
    // A limit's refusal can reach Postgres a flush before its answer: a row with no requests yet.
    // By day, its refusals still count on their day, so that the days add up to the range.
    if (requests === 0 && (granularity === 'range' || rate + quota === 0)) continue
    let day: Day | undefined = entry.days[entry.days.length - 1]
    if (day === undefined || day.date !== row.day) {
      day =
        granularity === 'day'
          ? {
              date: row.day,
              requests: 0,
              by_status: { '2xx': 0, '3xx': 0, '4xx': 0, '5xx': 0 },
              limited: { rate: 0, quota: 0 },
              units: { requests: 0 },
            }
          : { date: row.day, requests: 0, units: { requests: 0 } }
      entry.days.push(day)
    }
    day.requests += requests
    if (day.by_status !== undefined) day.by_status[statusClass] += requests
    if (day.limited !== undefined) {
      day.limited.rate += rate
      day.limited.quota += quota
    }
  }
  addUnits(
    entries,
    (entry) => entry.sub_account_id,
    units.map((row) => ({ owner: row.tenant_id, day: row.day, meter: row.meter, units: row.units })),
  )
  return entries
}

/**
 * Adds `more` units of `meter`, saturating at USAGE_COUNT_MAX (docs/billing.md, Bounds). A meter's
 * name is data: read as an own property only (`constructor` is no function here), and written as one.
 */
function add(units: Units, meter: string, more: number): void {
  const byMeter = units as Record<string, number>
  const sum = (Object.hasOwn(byMeter, meter) ? byMeter[meter]! : 0) + more
  Object.defineProperty(byMeter, meter, {
    value: Math.min(sum, USAGE_COUNT_MAX),
    writable: true,
    enumerable: true,
    configurable: true,
  })
}

/** Adds units by owner (a sub-account, a key), day and meter to the entries and their days. */
function addUnits<E extends { units: Units; days: { date: string; units: Units }[] }>(
  entries: readonly E[],
  ownerOf: (entry: E) => string,
  rows: readonly { owner: string; day: string; meter: string; units: string }[],
): void {
  const byOwner = new Map(entries.map((entry) => [ownerOf(entry), entry]))
  for (const row of rows) {
    const entry = byOwner.get(row.owner)
    if (entry === undefined) continue
    const units = Number(row.units)
    add(entry.units, row.meter, units)
    const day = entry.days.find((d) => d.date === row.day)
    if (day !== undefined) add(day.units, row.meter, units)
  }
}

/**
 * One page of the usage report of a parent's sub-accounts (store/usage.ts's usageRows), with the
 * units of each: `limit` counts sub-accounts.
 */
export async function readUsage(
  db: Sql | Tx,
  parentId: string,
  range: Parameters<typeof usageRows>[2],
  granularity: Granularity = 'range',
  withName = false,
): Promise<(UsageEntry & { seq: string })[]> {
  const rows = await usageRows(db, parentId, range)
  const units = await unitRows(db, [...new Set(rows.map((row) => row.id))], range)
  return usageEntries(rows, granularity, withName, units)
}

/**
 * Rows of one page of a sub-account's usage by key (sorted by key, then day) as entries, each with
 * its position. A key whose row is gone (never, as keys are kept) would show with an empty name.
 */
export function keyUsageEntries(
  rows: readonly KeyUsageRow[],
  subAccountId: string,
  units: readonly KeyUnitRow[] = [],
): (KeyUsageEntry & { seq: string })[] {
  const entries: (KeyUsageEntry & { seq: string })[] = []
  for (const row of rows) {
    let entry = entries[entries.length - 1]
    if (entry === undefined || entry.seq !== row.seq) {
      entry = {
        seq: row.seq,
        key_id: row.key_id,
        name: row.name ?? '',
        prefix: row.prefix ?? '',
        owner: row.key_tenant_id === subAccountId ? 'sub_account' : 'parent',
        requests: 0,
        by_status: { '2xx': 0, '3xx': 0, '4xx': 0, '5xx': 0 },
        days: [],
        units: { requests: 0 },
      }
      entries.push(entry)
    }
    const requests = Number(row.requests)
    entry.requests += requests
    entry.by_status[`${row.status_class}xx` as keyof KeyUsageEntry['by_status']] += requests
    const day = entry.days[entry.days.length - 1]
    if (day?.date === row.day) day.requests += requests
    else entry.days.push({ date: row.day, requests, units: { requests: 0 } })
  }
  addUnits(
    entries,
    (entry) => entry.key_id,
    units.map((row) => ({ owner: row.key_id, day: row.day, meter: row.meter, units: row.units })),
  )
  return entries
}
