// The Requests screen's filters (docs/console.md), held in the address (`#/requests?status=5xx`)
// so that a link can set them: read from the hash's query, written back to it. Pure, without the
// DOM, so that test/unit/console-request-filters.test.ts runs it in Node.

/** The filters of `GET /v1/sub-accounts/requests`, in the order the address spells them. */
export const FILTER_NAMES = ['sub_account_id', 'key_id', 'status', 'code', 'route', 'since', 'until'] as const
export type FilterName = (typeof FILTER_NAMES)[number]
/** Every filter, `''` when unset. */
export type RequestFilters = Record<FilterName, string>

export const NO_FILTERS: RequestFilters = Object.freeze({
  sub_account_id: '',
  key_id: '',
  status: '',
  code: '',
  route: '',
  since: '',
  until: '',
})

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

/** The console's ids are UUIDs: the one check an id passes before it goes into a link or a path. */
export function isUuid(text: string): boolean {
  return UUID.test(text)
}

export interface ParsedFilters {
  filters: RequestFilters
  /** The filters the console refuses before asking: the API's own refusals say the rest. */
  invalid: { path: string; message: string }[]
}

/**
 * The filters of a hash's query (what follows `?`). Names it does not know are ignored; ids that
 * are not UUIDs are kept (for the form to show) but named invalid, so that no call is made.
 * The values reach the API only as query parameters (api.ts `query()`), never in its path.
 */
export function parseFilters(search: string): ParsedFilters {
  // URLSearchParams never throws: a broken %-escape is kept as it was typed.
  const params = new URLSearchParams(search)
  const filters = { ...NO_FILTERS }
  for (const name of FILTER_NAMES) filters[name] = params.get(name)?.trim() ?? ''
  const invalid: ParsedFilters['invalid'] = []
  for (const name of ['sub_account_id', 'key_id'] as const) {
    if (filters[name] !== '' && !isUuid(filters[name])) invalid.push({ path: name, message: 'is not a UUID' })
  }
  return { filters, invalid }
}

export function hasFilters(filters: RequestFilters): boolean {
  return FILTER_NAMES.some((name) => filters[name] !== '')
}

/** The address of the Requests screen with these filters set (the unset ones left out). */
export function requestsHash(filters: Partial<RequestFilters>): string {
  const params = new URLSearchParams()
  for (const name of FILTER_NAMES) {
    const value = filters[name]?.trim() ?? ''
    if (value !== '') params.set(name, value)
  }
  const text = params.toString()
  return text === '' ? '#/requests' : `#/requests?${text}`
}

/**
 * A UTC day's bounds as the API reads them: `since` is the day's first instant and `until` the
 * next day's, which the log leaves out (`time < until`).
 */
export function dayBounds(date: string): { since: string; until: string } {
  const start = new Date(`${date}T00:00:00.000Z`)
  const next = new Date(start)
  next.setUTCDate(next.getUTCDate() + 1)
  return { since: start.toISOString(), until: next.toISOString() }
}

/**
 * The requests behind one bar of the usage chart: its day, its status class (the limits' 429s as
 * `429`), of one sub-account or (null) the whole account.
 */
export function usageRequestsHash(subAccountId: string | null, date: string, statusClass: string): string {
  return requestsHash({ sub_account_id: subAccountId ?? '', status: statusClass, ...dayBounds(date) })
}

/**
 * An instant as a `datetime-local` field shows it, read as UTC (`2026-11-23T16:05:32`); `''` when
 * the text is no instant. The form's fields are UTC, like the usage screen's dates.
 */
export function toUtcField(instant: string): string {
  if (instant === '') return ''
  const ms = Date.parse(instant)
  return Number.isNaN(ms) ? '' : new Date(ms).toISOString().slice(0, 19)
}

/** A `datetime-local` field's value (minutes or seconds), read as UTC, as RFC 3339. */
export function fromUtcField(value: string): string {
  if (value === '') return ''
  const ms = Date.parse(`${value}Z`)
  return Number.isNaN(ms) ? value : new Date(ms).toISOString()
}
