// The calendar month a monthly quota counts in: UTC, as the usage report's days are.

/** `YYYY-MM` of the UTC month `now` (ms since the epoch) falls in. */
export function monthOf(now: number): string {
  const date = new Date(now)
  return `${date.getUTCFullYear()}-${String(date.getUTCMonth() + 1).padStart(2, '0')}`
}

/** The first instant of that month and of the next, in ms. */
export function monthBounds(now: number): { start: number; end: number } {
  const date = new Date(now)
  const start = Date.UTC(date.getUTCFullYear(), date.getUTCMonth(), 1)
  const end = Date.UTC(date.getUTCFullYear(), date.getUTCMonth() + 1, 1)
  return { start, end }
}

/** The month's length in whole seconds: the `w` of a quota's RateLimit-Policy. */
export function monthSeconds(now: number): number {
  const { start, end } = monthBounds(now)
  return (end - start) / 1000
}

/** Whole seconds, at least 1, until the next month begins: a quota refusal's Retry-After. */
export function secondsToNextMonth(now: number): number {
  return Math.max(1, Math.ceil((monthBounds(now).end - now) / 1000))
}
