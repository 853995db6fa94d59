// When a failed delivery is tried again (docs/events.md, Delivery): after 5 s, 5 min, 30 min, 2 h,
// 5 h, 10 h and 10 h, then given up: eight attempts over about 28 hours, as Standard Webhooks and
// Svix do. WEBHOOKS_RETRY_SCHEDULE may set another list (tests shorten it).

/** Delays in ms before attempts 2, 3, …; its length is how many retries follow the first attempt. */
export type RetrySchedule = readonly number[]

export const DEFAULT_RETRY_SCHEDULE = '5s,5m,30m,2h,5h,10h,10h'

/** Five days of nothing but failures disable an endpoint. */
export const FAILING_DAYS_BEFORE_DISABLE = 5

const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 } as const
const MAX_DELAY_MS = 7 * 24 * 3_600_000
const MAX_RETRIES = 20

/** `5s,5m,30m` → delays in ms; throws a message that says what is wrong with the list. */
export function parseRetrySchedule(text: string): RetrySchedule {
  const parts = text.split(',').map((part) => part.trim())
  if (parts.length > MAX_RETRIES) throw new Error(`must list at most ${MAX_RETRIES} delays`)
  return parts.map((part) => {
    const match = /^(\d{1,9})(ms|s|m|h)$/.exec(part)
    if (match === null) throw new Error(`must be delays like 5s,5m,2h separated by commas; "${part}" is not one`)
    const ms = Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS]
    if (ms > MAX_DELAY_MS) throw new Error(`must not wait more than 7 days between attempts; "${part}" does`)
    return ms
  })
}

/** The time of the attempt after `attempt` (1-based) failed at `now`, or null when it was the last. */
export function nextAttemptAt(schedule: RetrySchedule, attempt: number, now: Date): Date | null {
  const delay = schedule[attempt - 1]
  return delay === undefined ? null : new Date(now.getTime() + delay)
}
