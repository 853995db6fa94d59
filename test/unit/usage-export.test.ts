// The usage export's records (src/usage/export.ts): CloudEvent ids that stay the same, CSV fields
// quoted only where RFC 4180 needs it and never altered, ranges refused with the rule.
import t from 'tap'
import type { ApiError } from '../../src/errors.js'
import type { ExportRow } from '../../src/store/usage-periods.js'
import { csvLine, exportRange, exportText, usageEvent } from '../../src/usage/export.js'

const row: ExportRow = {
  account_id: '11111111-1111-4111-8111-111111111111',
  sub_account_id: null,
  external_id: '=HYPERLINK("x")',
  meter: 'tokens',
  units: '9007199254740991',
  requests: '3',
  period_start: new Date('2026-11-26T07:00:00.000Z'),
  late_units: '1',
}

t.test("an event: the parent's own use names the account; ids without fractions of a second", async (t) => {
  const event = usageEvent(row, 3600, 'https://gw.example')
  t.equal(event.id, `${row.account_id}:${row.account_id}:tokens:2026-11-26T07:00:00Z`)
  t.equal(event.subject, row.account_id)
  t.equal(event.time, '2026-11-26T07:00:00Z')
  t.same(event.data, {
    account_id: row.account_id,
    sub_account_id: null,
    external_id: '=HYPERLINK("x")',
    meter: 'tokens',
    units: 9007199254740991,
    requests: 3,
    period_start: '2026-11-26T07:00:00Z',
    period_end: '2026-11-26T08:00:00Z',
    late: true,
  })
  const sub = usageEvent({ ...row, sub_account_id: '22222222-2222-4222-8222-222222222222', late_units: '0' }, 60, 's')
  t.equal(sub.id, `${row.account_id}:22222222-2222-4222-8222-222222222222:tokens:2026-11-26T07:00:00Z`)
  t.equal(sub.data.period_end, '2026-11-26T07:01:00Z')
  t.equal(sub.data.late, false)
})

t.test('CSV: quoted where a comma, quote or line break needs it, exact otherwise', async (t) => {
  t.equal(csvLine(['a', 1, true, null]), 'a,1,true,\r\n')
  t.equal(csvLine(['a,b', 'say "hi"', 'two\nlines', 'cr\r']), '"a,b","say ""hi""","two\nlines","cr\r"\r\n')
  t.equal(
    csvLine(['=1+1', '-2', '@x']),
    '=1+1,-2,@x\r\n',
    'values a spreadsheet reads as formulas are kept as they are',
  )
})

t.test('the text: a CSV header even when empty; pages joined', async (t) => {
  const read = async (format: 'csv' | 'ndjson', pages: ExportRow[][]) => {
    let text = ''
    for await (const chunk of exportText(pages, { format, periodSeconds: 3600, source: 's' })) text += chunk
    return text
  }
  t.equal(
    await read('csv', []),
    'account_id,sub_account_id,external_id,meter,units,requests,period_start,period_end,late\r\n',
  )
  t.equal(await read('ndjson', []), '')
  t.equal((await read('ndjson', [[row], [], [row, row]])).split('\n').length, 4)
})

t.test('ranges: RFC 3339, at period starts, from before to; this month so far by default', async (t) => {
  const now = Date.parse('2026-11-26T07:20:00Z')
  const fields = (query: { from?: string; to?: string }) => {
    try {
      exportRange(query, 3600, now)
      return null
    } catch (err) {
      return (err as ApiError).options.errors!.map((e) => `${e.path} ${e.message}`)
    }
  }
  t.same(exportRange({}, 3600, now), {
    from: new Date('2026-11-01T00:00:00Z'),
    to: new Date('2026-11-26T08:00:00Z'),
  })
  t.same(exportRange({}, 60, now).to, new Date('2026-11-26T07:21:00Z'), 'the end of the period under way')
  t.same(exportRange({ from: '2026-11-26T07:00:00Z', to: '2026-11-26T09:00:00+01:00' }, 3600, now), {
    from: new Date('2026-11-26T07:00:00Z'),
    to: new Date('2026-11-26T08:00:00Z'),
  })
  t.match(fields({ from: '2026-11-26T09:00:00Z' }), [/^\/querystring\/from must be before to \(2026-11-26T08:00:00Z\)/])
  t.match(fields({ from: '2026-11-26T07:30:00Z', to: '2026-11-26T09:00:00Z' }), [
    /^\/querystring\/from must be at the start of a usage period \(every 3600 s from midnight UTC\), such as 2026-11-26T07:00:00Z/,
  ])
  t.match(fields({ from: '2026-11-26', to: '2026-11-27T00:00:00Z' }), [
    /^\/querystring\/from must be an RFC 3339 date-time/,
  ])
  t.match(fields({ from: '2026-11-26T08:00:00Z', to: '2026-11-26T07:00:00Z' }), [
    /^\/querystring\/from must be before to/,
  ])
  t.match(fields({ from: '1969-12-31T23:00:00Z', to: '1970-01-01T00:00:00Z' }), null, 'before 1970 too')
})
