// The usage report by day (docs/api.md#usage-report, `granularity=day`): each day of a range by
// status class, in one call for a range of up to MAX_DAYS (one page for every 100 sub-accounts
// with usage, or one call for a sub-account, by `sub_account_id`).
import { ApiError, api, type Page, query } from './api.js'
import type { KeyUsageEntry, UsageEntry } from './types.js'

export const CLASSES = ['2xx', '3xx', '4xx', '429', '5xx'] as const
export type StatusClass = (typeof CLASSES)[number]

/** What the chart draws: one value per day and class; `4xx` leaves out the limits' 429s. */
export interface DailySeries {
  dates: string[]
  counts: Record<StatusClass, number[]>
}

/** The longest range the chart draws: the API's own bound on a report's range. */
export const MAX_DAYS = 366

export function today(): string {
  return new Date().toISOString().slice(0, 10)
}

export function firstOfMonth(): string {
  return `${today().slice(0, 8)}01`
}

export function datesBetween(from: string, to: string): string[] {
  const dates: string[] = []
  for (let d = new Date(`${from}T00:00:00Z`); d <= new Date(`${to}T00:00:00Z`); d.setUTCDate(d.getUTCDate() + 1)) {
    dates.push(d.toISOString().slice(0, 10))
    if (dates.length > MAX_DAYS) break
  }
  return dates
}

/**
 * Every entry of the report for a range (all pages), of one sub-account or (null) all of them;
 * with `named`, each with its sub-account's name (`include=name`, for the breakdown).
 */
export async function reportEntries(
  from: string,
  to: string,
  subAccountId: string | null,
  granularity: 'range' | 'day' = 'range',
  named = false,
): Promise<UsageEntry[]> {
  const entries: UsageEntry[] = []
  let cursor: string | null = null
  do {
    const page: Page<UsageEntry> = await api(
      'GET',
      `/usage${query({ from, to, granularity, sub_account_id: subAccountId, limit: 100, cursor, include: named ? 'name' : null })}`,
    )
    entries.push(...page.data)
    cursor = page.next_cursor
  } while (cursor !== null)
  return entries
}

type Day = UsageEntry['days'][number]

function addDay(counts: Record<StatusClass, number>, day: Day): void {
  const limited = (day.limited?.rate ?? 0) + (day.limited?.quota ?? 0)
  const byStatus = day.by_status ?? { '2xx': 0, '3xx': 0, '4xx': 0, '5xx': 0 }
  counts['2xx'] += byStatus['2xx']
  counts['3xx'] += byStatus['3xx']
  // A refusal can reach the report a second before its answer: never a negative bar.
  counts['4xx'] += Math.max(byStatus['4xx'] - limited, 0)
  counts['429'] += limited
  counts['5xx'] += byStatus['5xx']
}

/** One line of a breakdown (by sub-account or by key): its requests by class, the limits' 429s apart. */
export interface Share {
  id: string
  requests: number
  counts: Record<StatusClass, number>
}

/** The whole account's entries as the breakdown by sub-account's lines, most requests first. */
export function sharesOf(entries: readonly UsageEntry[]): (Share & { entry: UsageEntry })[] {
  return entries
    .map((entry) => {
      const counts: Record<StatusClass, number> = { '2xx': 0, '3xx': 0, '4xx': 0, '429': 0, '5xx': 0 }
      for (const day of entry.days) addDay(counts, day)
      return { id: entry.sub_account_id, requests: entry.requests, counts, entry }
    })
    .sort((a, b) => b.requests - a.requests)
}

/** A sub-account's usage by key over a range (all pages: `GET …/{id}/usage`), most requests first. */
export async function keyUsage(from: string, to: string, subAccountId: string): Promise<KeyUsageEntry[]> {
  const entries: KeyUsageEntry[] = []
  let cursor: string | null = null
  do {
    const page: Page<KeyUsageEntry> = await api(
      'GET',
      `/${encodeURIComponent(subAccountId)}/usage${query({ from, to, limit: 100, cursor })}`,
    )
    entries.push(...page.data)
    cursor = page.next_cursor
  } while (cursor !== null)
  return entries.sort((a, b) => b.requests - a.requests)
}

/** The day chart's series and the report's entries it came from (named, for the breakdown). */
export interface RangeUsage {
  series: DailySeries
  entries: UsageEntry[]
}

/** Each day of [from, to] by status class, for one sub-account or (null) all of them. */
export async function dailyUsage(from: string, to: string, subAccountId: string | null): Promise<RangeUsage> {
  if (from > to)
    throw new ApiError({ status: 0, code: 'bad_range', title: 'The range is empty', detail: '“From” is after “To”.' })
  const dates = datesBetween(from, to)
  if (dates.length > MAX_DAYS)
    throw new ApiError({
      status: 0,
      code: 'bad_range',
      title: 'The range is too long',
      detail: `The daily chart shows at most ${MAX_DAYS} days: pick a shorter range.`,
    })
  const days: Record<StatusClass, number>[] = dates.map(() => ({ '2xx': 0, '3xx': 0, '4xx': 0, '429': 0, '5xx': 0 }))
  const index = new Map(dates.map((date, i) => [date, i]))
  // The names only for the whole account, where the breakdown by sub-account needs them.
  const entries = await reportEntries(from, to, subAccountId, 'day', subAccountId === null)
  for (const entry of entries) {
    for (const day of entry.days) {
      const i = index.get(day.date)
      if (i !== undefined) addDay(days[i]!, day)
    }
  }
  const counts = Object.fromEntries(CLASSES.map((c) => [c, days.map((d) => d[c])])) as Record<StatusClass, number[]>
  return { series: { dates, counts }, entries }
}

export function totalOf(series: DailySeries, c: StatusClass): number {
  return series.counts[c].reduce((a, b) => a + b, 0)
}
