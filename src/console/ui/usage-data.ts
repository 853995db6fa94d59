// The usage report read day by day, so that each day's requests can be split by status class: the
// report gives a range's classes but only each day's total (docs/api.md#usage-report).
import { ApiError, api, type Page, query } from './api.js'
import type { UsageEntry } from './types.js'

export const CLASSES = ['2xx', '3xx', '4xx', '429', '5xx'] as const
export type StatusClass = (typeof CLASSES)[number]

/** What the chart draws: one value per day and class; `4xx` leaves out the limits' 429s. */
export interface DailySeries {
  dates: string[]
  counts: Record<StatusClass, number[]>
}

/** The longest range the chart reads day by day (one report call a day). */
export const MAX_DAYS = 31

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

/** Every entry of the report for a range, all pages. */
export async function reportEntries(from: string, to: string): Promise<UsageEntry[]> {
  const entries: UsageEntry[] = []
  let cursor: string | null = null
  do {
    const page: Page<UsageEntry> = await api('GET', `/usage${query({ from, to, limit: 100, cursor })}`)
    entries.push(...page.data)
    cursor = page.next_cursor
  } while (cursor !== null)
  return entries
}

function addEntry(counts: Record<StatusClass, number>, e: UsageEntry): void {
  const limited = e.limited.rate + e.limited.quota
  counts['2xx'] += e.by_status['2xx']
  counts['3xx'] += e.by_status['3xx']
  counts['4xx'] += e.by_status['4xx'] - limited
  counts['429'] += limited
  counts['5xx'] += e.by_status['5xx']
}

/** Each day of [from, to] by status class, for one sub-account or (null) all of them. */
export async function dailyUsage(from: string, to: string, subAccountId: string | null): Promise<DailySeries> {
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
  // A few days at a time: the management API allows each parent 50 calls a second.
  let next = 0
  const worker = async () => {
    while (next < dates.length) {
      const i = next++
      const entries = await reportEntries(dates[i]!, dates[i]!)
      for (const e of entries) if (subAccountId === null || e.sub_account_id === subAccountId) addEntry(days[i]!, e)
    }
  }
  await Promise.all([worker(), worker(), worker(), worker()])
  const counts = Object.fromEntries(CLASSES.map((c) => [c, days.map((d) => d[c])])) as Record<StatusClass, number[]>
  return { dates, counts }
}

export function totalOf(series: DailySeries, c: StatusClass): number {
  return series.counts[c].reduce((a, b) => a + b, 0)
}
