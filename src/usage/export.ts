// The usage export's records (docs/billing.md): one per closed period, tenant and meter, as a
// CloudEvent 1.0 (structured JSON) or a CSV row of its data. The same records whether pulled (the
// export route, the CLI) or pushed, with ids that stay the same however often they are sent.
import { DATE_TIME_RULE, finerThanMilliseconds, parseDateTime } from '../dates.js'
import { type FieldError, validationFailed } from '../errors.js'
import type { Static } from 'typebox'
import type {
  UsageEvent as UsageEventSchema,
  UsageRecordData as UsageRecordDataSchema,
} from '../schemas/usage-export.js'
import type { ExportRow } from '../store/usage-periods.js'

export type UsageRecordData = Static<typeof UsageRecordDataSchema>
export type UsageEvent = Static<typeof UsageEventSchema>

/** An instant as the export writes it: seconds, no fraction (`2026-11-26T07:00:00Z`). */
export const exportInstant = (instant: Date) => `${instant.toISOString().slice(0, 19)}Z`

/** One export row as its CloudEvent; `source` is the gateway's issuer. */
export function usageEvent(row: ExportRow, periodSeconds: number, source: string): UsageEvent {
  const periodStart = exportInstant(row.period_start)
  const subject = row.sub_account_id ?? row.account_id
  return {
    specversion: '1.0',
    type: 'com.tenancy-gateway.usage',
    source,
    id: `${row.account_id}:${subject}:${row.meter}:${periodStart}`,
    time: periodStart,
    subject,
    datacontenttype: 'application/json',
    data: {
      account_id: row.account_id,
      sub_account_id: row.sub_account_id,
      external_id: row.external_id,
      meter: row.meter,
      units: Number(row.units),
      requests: Number(row.requests),
      period_start: periodStart,
      period_end: exportInstant(new Date(row.period_start.getTime() + periodSeconds * 1000)),
      late: row.late_units !== '0',
      // What billing draws down: the units of this record burned from each credit grant.
      ...(row.credits == null ? {} : { credits: row.credits }),
    },
  }
}

/** The CSV columns: the fields of an event's data, in this order. */
// A record's credits (nested, per grant) are the ndjson's only: CSV keeps one line a record.
export const CSV_COLUMNS: readonly Exclude<keyof UsageRecordData, 'credits'>[] = [
  'account_id',
  'sub_account_id',
  'external_id',
  'meter',
  'units',
  'requests',
  'period_start',
  'period_end',
  'late',
]

/**
 * A record as a CSV line (RFC 4180, CRLF): a null is an empty field; a field with a comma, quote or
 * line break is quoted. Values are exact, never altered for spreadsheets
 * (docs/decisions/0301-csv-values-are-exact.md).
 */
export function csvLine(values: readonly (string | number | boolean | null)[]): string {
  return `${values.map(csvField).join(',')}\r\n`
}

function csvField(value: string | number | boolean | null): string {
  if (value === null) return ''
  const text = String(value)
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text
}

export const csvRecord = (data: UsageRecordData) => csvLine(CSV_COLUMNS.map((column) => data[column]))

/**
 * `from` and `to` of an export: RFC 3339 date-times at period boundaries, `from` before `to`; by
 * default the start of this UTC month and the end of the period under way (the answer is cut where
 * the closed periods end anyway). Refused with the field and the rule, never rounded: a billing
 * range is what was asked.
 */
export function exportRange(
  query: { from?: string | undefined; to?: string | undefined },
  periodSeconds: number,
  nowMs: number,
): { from: Date; to: Date } {
  const errors: FieldError[] = []
  const periodMs = periodSeconds * 1000
  const offset = (ms: number) => ((ms % periodMs) + periodMs) % periodMs
  const monthStart = new Date(nowMs)
  monthStart.setUTCDate(1)
  monthStart.setUTCHours(0, 0, 0, 0)
  const parse = (name: 'from' | 'to', fallback: Date): Date => {
    const given = query[name]
    if (given === undefined) return fallback
    const instant = parseDateTime(given)
    if (instant === null) errors.push({ path: `/querystring/${name}`, message: DATE_TIME_RULE })
    // `.0009Z` after a period start is not it either, though its Date is (parseDateTime).
    else if (offset(instant.getTime()) !== 0 || finerThanMilliseconds(given))
      errors.push({
        path: `/querystring/${name}`,
        message: `must be at the start of a usage period (every ${periodSeconds} s from midnight UTC), such as ${exportInstant(
          new Date(instant.getTime() - offset(instant.getTime())),
        )}`,
      })
    return instant ?? fallback
  }
  const from = parse('from', monthStart)
  const to = parse('to', new Date(nowMs - offset(nowMs) + periodMs))
  if (errors.length > 0) throw validationFailed(errors)
  if (from.getTime() >= to.getTime())
    throw validationFailed([{ path: '/querystring/from', message: `must be before to (${exportInstant(to)})` }])
  return { from, to }
}

/**
 * Where an export of `range` ends: at `to`, or where the closed periods end if that is sooner (an
 * open period's units still move, and a billed record must not); null when nothing of it is closed.
 */
export function exportEnd(range: { from: Date; to: Date }, closedUntil: Date | null): Date | null {
  const end = closedUntil === null || closedUntil < range.to ? closedUntil : range.to
  return end !== null && end > range.from ? end : null
}

export type ExportFormat = 'ndjson' | 'csv'

export const EXPORT_CONTENT_TYPES: Record<ExportFormat, string> = {
  ndjson: 'application/x-ndjson; charset=utf-8',
  csv: 'text/csv; charset=utf-8; header=present',
}

/**
 * The export's text, page by page as Postgres gives the rows: ndjson, a CloudEvent a line; csv,
 * a header row, then each event's data. Stops reading when the consumer stops (a client gone).
 */
export async function* exportText(
  pages: AsyncIterable<readonly ExportRow[]> | Iterable<readonly ExportRow[]>,
  { format, periodSeconds, source }: { format: ExportFormat; periodSeconds: number; source: string },
): AsyncGenerator<string> {
  if (format === 'csv') yield csvLine(CSV_COLUMNS)
  for await (const rows of pages) {
    let text = ''
    for (const row of rows) {
      const event = usageEvent(row, periodSeconds, source)
      text += format === 'csv' ? csvRecord(event.data) : `${JSON.stringify(event)}\n`
    }
    if (text !== '') yield text
  }
}
