// Dates and times a client sends (docs/api.md): one reading of RFC 3339 for every route and command
// that takes one, and the range the store can hold. Postgres keeps years 4713 BC to 294276 AD, but
// JavaScript's Date, ISO 8601's four digits and the API's own answers agree only on 0001–9999, so
// anything outside (year 0000, or 0001-01-01T00:30:00+01:00, which is year 0 in UTC) is the
// client's 400, never a store error.

// RFC 3339 §5.6 date-time: a full date, `T`, a full time with optional fraction, `Z` or an offset.
const DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(?:[Zz]|([+-])(\d{2}):(\d{2}))$/
const DATE = /^(\d{4})-(\d{2})-(\d{2})$/

export const EARLIEST = '0001-01-01T00:00:00Z'
export const LATEST = '9999-12-31T23:59:59.999Z'
const EARLIEST_MS = Date.parse(EARLIEST)
export const LATEST_MS = Date.parse(LATEST)

/** What a field error says of a date-time this module refused. */
export const DATE_TIME_RULE = `must be an RFC 3339 date-time with a time zone, from ${EARLIEST} to 9999-12-31T23:59:59Z, such as 2027-01-31T12:00:00Z`
/** What a field error says of a calendar date this module refused. */
export const DATE_RULE =
  'must be a date YYYY-MM-DD from 0001-01-01 to 9999-12-31, or an RFC 3339 date-time in that range'

const daysInMonth = (year: number, month: number) => {
  const date = new Date(0)
  // setUTCFullYear, not Date.UTC: that maps the years 0–99 onto 1900–1999.
  date.setUTCFullYear(year, month, 0)
  return date.getUTCDate()
}

function isDay(year: number, month: number, day: number): boolean {
  return year >= 1 && month >= 1 && month <= 12 && day >= 1 && day <= daysInMonth(year, month)
}

/**
 * An RFC 3339 date-time as an instant, or null when it is malformed, names a day or time that does
 * not exist (a leap second included: no store keeps one), or falls outside 0001–9999 once in UTC.
 */
export function parseDateTime(text: string): Date | null {
  const match = DATE_TIME.exec(text)
  if (match === null) return null
  const [year, month, day, hour, minute, second] = match.slice(1, 7).map(Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
  ]
  if (!isDay(year, month, day) || hour > 23 || minute > 59 || second > 59) return null
  let offsetMinutes = 0
  if (match[8] !== undefined) {
    const offsetHour = Number(match[9])
    const offsetMinute = Number(match[10])
    if (offsetHour > 23 || offsetMinute > 59) return null
    offsetMinutes = (match[8] === '-' ? -1 : 1) * (offsetHour * 60 + offsetMinute)
  }
  const local = new Date(0)
  local.setUTCFullYear(year, month - 1, day)
  local.setUTCHours(hour, minute, second, Math.floor(Number(match[7] ?? 0) * 1000))
  const ms = local.getTime() - offsetMinutes * 60_000
  return ms < EARLIEST_MS || ms > LATEST_MS ? null : new Date(ms)
}

/**
 * Whether a date-time's fraction has digits past the millisecond that are not zero: parseDateTime
 * drops them (a Date holds milliseconds), which a rule that takes exact instants only must refuse.
 */
export function finerThanMilliseconds(text: string): boolean {
  const fraction = DATE_TIME.exec(text)?.[7] ?? ''
  return /[1-9]/.test(fraction.slice(4))
}

/** A calendar date `YYYY-MM-DD` that exists, from 0001-01-01 to 9999-12-31, or null. */
export function parseDate(text: string): string | null {
  const match = DATE.exec(text)
  if (match === null) return null
  const [year, month, day] = match.slice(1).map(Number) as [number, number, number]
  return isDay(year, month, day) ? text : null
}

/** The UTC calendar date of an instant this module accepted: `YYYY-MM-DD`. */
export function utcDate(instant: Date): string {
  return instant.toISOString().slice(0, 10)
}
