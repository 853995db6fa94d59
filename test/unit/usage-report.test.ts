// The usage report's date rules and entry shape (docs/api.md), as plain functions over a fixed
// clock.
import t from 'tap'
import { ApiError } from '../../src/errors.js'
import type { UsageRow } from '../../src/store/usage-reads.js'
import { MAX_RANGE_DAYS, parseReportDate, reportRange, usageEntries } from '../../src/usage/report.js'

const NOW = Date.parse('2026-11-21T15:04:05.678Z')

/** The ApiError `run` throws, or null when it returns. */
function thrown(run: () => unknown): ApiError | null {
  try {
    run()
  } catch (err) {
    if (err instanceof ApiError) return err
    throw err
  }
  return null
}

t.test('parseReportDate: calendar dates', async (t) => {
  for (const date of [
    '2026-11-21',
    '2026-01-01',
    '2026-12-31',
    '2024-02-29',
    '2000-02-29',
    '1970-01-01',
    '9999-12-31',
  ]) {
    t.equal(parseReportDate(date), date, date)
  }
  const impossible = [
    '2026-02-29',
    '2026-02-30',
    '1900-02-29',
    '2026-13-01',
    '2026-00-10',
    '2026-04-31',
    '2026-11-00',
    '2026-11-32',
    '0000-01-01',
  ]
  for (const date of impossible) t.equal(parseReportDate(date), null, `${date} does not exist`)
  const malformed = [
    '',
    '2026-1-01',
    '2026-01-1',
    '26-01-01',
    '20260101',
    '2026/01/01',
    ' 2026-01-01',
    '2026-01-01 ',
    '2026-01-01x',
    '+2026-01-01',
    'today',
    '2026-W01',
    '１２３４-01-01',
  ]
  for (const value of malformed) t.equal(parseReportDate(value), null, `${JSON.stringify(value)} is not a date`)
})

t.test('parseReportDate: RFC 3339 date-times are taken as their UTC date', async (t) => {
  const cases: [string, string][] = [
    ['2026-11-20T10:00:00Z', '2026-11-20'],
    ['2026-11-20T23:59:59.999Z', '2026-11-20'],
    ['2026-11-20T00:00:00z', '2026-11-20'],
    ['2026-11-20t12:00:00Z', '2026-11-20'],
    ['2026-11-20T10:00:00.123456789Z', '2026-11-20'],
    ['2026-11-20T23:30:00-02:00', '2026-11-21'],
    ['2026-11-20T21:59:59-02:00', '2026-11-20'],
    ['2026-11-21T00:30:00+01:00', '2026-11-20'],
    ['2026-11-21T01:00:00+01:00', '2026-11-21'],
    ['2026-11-20T12:00:00+00:00', '2026-11-20'],
    ['2026-12-31T23:00:00-05:00', '2027-01-01'],
    ['2026-03-01T00:30:00+01:00', '2026-02-28'],
    // A `+` that was not percent-encoded arrives as a space in a query string.
    ['2026-11-21T00:30:00 01:00', '2026-11-20'],
    ['2026-11-21T01:30:00 01:00', '2026-11-21'],
  ]
  for (const [value, day] of cases) t.equal(parseReportDate(value), day, value)

  const bad = [
    '2026-02-30T10:00:00Z',
    '2026-13-01T10:00:00Z',
    '2026-11-20T25:00:00Z',
    '2026-11-20T10:60:00Z',
    '2026-11-20T10:00:00',
    '2026-11-20T10:00Z',
    '2026-11-20 10:00:00Z',
    '2026-11-20T10:00:00+0100',
    '2026-11-20T10:00:00+01',
    '2026-11-20T10:00:00+25:00',
    '2026-11-20T10:00:00.Z',
    '2026-11-20T10:00:00.1234567890Z',
    '2026-11-20T10:00:00Z ',
    '2026-11-20T10:00:00  01:00',
  ]
  for (const value of bad) t.equal(parseReportDate(value), null, `${JSON.stringify(value)} refused`)

  // The UTC date of this instant is 10000-01-01, which has no YYYY-MM-DD form: not a report date
  // (and never a fragment of an ISO string such as "+010000-01").
  t.equal(parseReportDate('9999-12-31T23:00:00-02:00'), null, 'a date-time whose UTC date is in year 10000')
  t.equal(parseReportDate('9999-12-31T23:59:59Z'), '9999-12-31', 'the last representable instant is fine')
})

t.test('parseReportDate: years 0001 to 0099 are calendar dates too', async (t) => {
  // Date.UTC maps years 0–99 onto 1900–1999, so a round-trip check built on it refuses them.
  for (const date of ['0050-06-15', '0001-01-01', '0099-12-31', '0100-01-01'])
    t.equal(parseReportDate(date), date, `${date} is a date`)
})

t.test('reportRange: defaults are this month so far', async (t) => {
  t.same(reportRange({}, NOW), { from: '2026-11-01', to: '2026-11-21' })
  t.same(
    reportRange({}, Date.parse('2026-11-01T00:00:00Z')),
    { from: '2026-11-01', to: '2026-11-01' },
    'the first of the month: one day',
  )
  t.same(reportRange({}, Date.parse('2026-12-31T23:59:59.999Z')), { from: '2026-12-01', to: '2026-12-31' })
  t.same(
    reportRange({}, Date.parse('2026-03-01T00:30:00+01:00')),
    { from: '2026-02-01', to: '2026-02-28' },
    'the clock is read in UTC',
  )
  t.same(reportRange({ from: '2026-10-15' }, NOW), { from: '2026-10-15', to: '2026-11-21' }, 'to defaults to today')
  t.same(
    reportRange({ to: '2026-11-05' }, NOW),
    { from: '2026-11-01', to: '2026-11-05' },
    'from defaults to the first of the month',
  )
  t.same(
    reportRange({ from: '2026-11-19T23:30:00-02:00', to: '2026-11-21T00:30:00+01:00' }, NOW),
    { from: '2026-11-20', to: '2026-11-20' },
    'date-times become their UTC dates',
  )
})

t.test('reportRange: limits', async (t) => {
  t.same(
    reportRange({ from: '2026-11-21', to: '2026-11-21' }, NOW),
    { from: '2026-11-21', to: '2026-11-21' },
    'one day',
  )
  t.equal(MAX_RANGE_DAYS, 366)
  t.same(
    reportRange({ from: '2025-01-01', to: '2026-01-01' }, NOW),
    { from: '2025-01-01', to: '2026-01-01' },
    '366 days allowed',
  )
  t.same(
    reportRange({ from: '2024-01-01', to: '2024-12-31' }, NOW),
    { from: '2024-01-01', to: '2024-12-31' },
    'a whole leap year (366 days)',
  )
  t.same(
    reportRange({ from: '2030-01-01', to: '2030-01-05' }, NOW),
    { from: '2030-01-01', to: '2030-01-05' },
    'the future is an empty range, not an error',
  )

  const tooLong = thrown(() => reportRange({ from: '2025-01-01', to: '2026-01-02' }, NOW))
  t.equal(tooLong?.code, 'validation_failed', '367 days refused')
  t.equal(tooLong?.status, 400)
  t.ok(
    tooLong?.options.errors?.some((e) => e.path === '/querystring/to'),
    `names to: ${JSON.stringify(tooLong?.options.errors)}`,
  )
  t.equal(
    thrown(() => reportRange({ from: '2024-01-01', to: '2025-01-01' }, NOW))?.code,
    'validation_failed',
    '367 days over a leap year refused',
  )
  t.equal(
    thrown(() => reportRange({ from: '2020-01-01' }, NOW))?.code,
    'validation_failed',
    'from far back with the default to',
  )

  const beyond = thrown(() => reportRange({ from: '9999-12-31', to: '9999-12-31T23:00:00-02:00' }, NOW))
  t.equal(beyond?.code, 'validation_failed', 'a to in year 10000 is refused')
  t.ok(
    beyond?.options.errors?.some((e) => e.path === '/querystring/to'),
    `names to: ${JSON.stringify(beyond?.options.errors)}`,
  )

  const reversed = thrown(() => reportRange({ from: '2026-11-10', to: '2026-11-09' }, NOW))
  t.equal(reversed?.code, 'validation_failed', 'from after to')
  t.ok(
    reversed?.options.errors?.some((e) => e.path === '/querystring/from'),
    `names from: ${JSON.stringify(reversed?.options.errors)}`,
  )
  t.equal(
    thrown(() => reportRange({ from: '2026-12-01' }, NOW))?.code,
    'validation_failed',
    'from after the default to (today)',
  )
  t.equal(thrown(() => reportRange({ to: '2026-10-31' }, NOW))?.code, 'validation_failed', 'to before the default from')
})

t.test('reportRange: bad values name their field', async (t) => {
  const cases: [{ from?: string; to?: string }, string[]][] = [
    [{ from: 'yesterday' }, ['/querystring/from']],
    [{ to: '2026-02-30' }, ['/querystring/to']],
    [{ from: '' }, ['/querystring/from']],
    [{ from: '2026-13-01', to: 'x' }, ['/querystring/from', '/querystring/to']],
    [{ from: '2026-11-01', to: '2026-11-21T10:00:00' }, ['/querystring/to']],
  ]
  for (const [query, paths] of cases) {
    const err = thrown(() => reportRange(query, NOW))
    t.equal(err?.code, 'validation_failed', JSON.stringify(query))
    t.same(err?.options.errors?.map((e) => e.path).sort(), paths, `${JSON.stringify(query)} names ${paths.join(', ')}`)
  }
})

t.test('usageEntries: rows grouped per sub-account, by status class and by day', async (t) => {
  const row = (
    seq: string,
    id: string,
    ext: string | null,
    day: string,
    statusClass: number,
    requests: number,
    limited: { rate: number; quota: number } = { rate: 0, quota: 0 },
  ): UsageRow => ({
    seq,
    id,
    external_id: ext,
    name: `name of ${id}`,
    day,
    status_class: statusClass,
    requests: String(requests),
    limited_rate: String(limited.rate),
    limited_quota: String(limited.quota),
  })
  const A = 'aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa'
  const B = 'bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb'
  const rows = [
    row('7', A, 'eu', '2026-11-19', 2, 10),
    row('7', A, 'eu', '2026-11-19', 4, 2, { rate: 1, quota: 0 }),
    row('7', A, 'eu', '2026-11-20', 2, 5),
    row('7', A, 'eu', '2026-11-20', 3, 1),
    row('7', A, 'eu', '2026-11-20', 5, 3),
    row('12', B, null, '2026-11-20', 4, 4, { rate: 2, quota: 1 }),
    row('12', B, null, '2026-11-21', 2, 9007199254740),
    // A limit's refusal flushed before its answer: counted in limited, no day of its own.
    row('12', B, null, '2026-11-22', 4, 0, { rate: 0, quota: 1 }),
  ]
  // Units by day and meter: added to their day and to the entry; a meter only where it has use.
  const units = [
    { tenant_id: A, day: '2026-11-19', meter: 'requests', units: '30' },
    { tenant_id: A, day: '2026-11-20', meter: 'requests', units: '4' },
    { tenant_id: A, day: '2026-11-20', meter: 'tokens', units: '1500' },
    { tenant_id: B, day: '2026-11-21', meter: 'requests', units: '9007199254740' },
    // Another sub-account's (not on this page): no entry of its own.
    { tenant_id: '33333333-3333-4333-8333-333333333333', day: '2026-11-21', meter: 'requests', units: '5' },
  ]
  t.same(usageEntries(rows, 'range', false, units), [
    {
      seq: '7',
      sub_account_id: A,
      external_id: 'eu',
      requests: 21,
      by_status: { '2xx': 15, '3xx': 1, '4xx': 2, '5xx': 3 },
      days: [
        { date: '2026-11-19', requests: 12, units: { requests: 30 } },
        { date: '2026-11-20', requests: 9, units: { requests: 4, tokens: 1500 } },
      ],
      limited: { rate: 1, quota: 0 },
      units: { requests: 34, tokens: 1500 },
    },
    {
      seq: '12',
      sub_account_id: B,
      external_id: null,
      requests: 9007199254744,
      by_status: { '2xx': 9007199254740, '3xx': 0, '4xx': 4, '5xx': 0 },
      days: [
        { date: '2026-11-20', requests: 4, units: { requests: 0 } },
        { date: '2026-11-21', requests: 9007199254740, units: { requests: 9007199254740 } },
      ],
      limited: { rate: 2, quota: 2 },
      units: { requests: 9007199254740 },
    },
  ])
  t.same(usageEntries([]), [], 'no rows, no entries')
  const single = usageEntries([row('1', A, null, '2026-01-01', 5, 1)])
  t.same(single[0]?.by_status, { '2xx': 0, '3xx': 0, '4xx': 0, '5xx': 1 }, 'every class is present, zero when unused')
  t.equal(
    single[0]!.requests,
    Object.values(single[0]!.by_status).reduce((a, b) => a + b, 0),
    'requests is the sum of by_status',
  )
})
