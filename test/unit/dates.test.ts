// dates.ts: one reading of RFC 3339 and the range 0001–9999 (in UTC) for every date a client sends.
import t from 'tap'
import { finerThanMilliseconds, parseDate, parseDateTime, utcDate } from '../../src/dates.js'

t.test('parseDateTime: valid instants, any offset, any fraction', async (t) => {
  t.equal(parseDateTime('2026-11-23T08:00:00Z')?.toISOString(), '2026-11-23T08:00:00.000Z')
  t.equal(parseDateTime('2026-11-23t08:00:00.5z')?.toISOString(), '2026-11-23T08:00:00.500Z')
  t.equal(parseDateTime('2026-11-23T08:00:00.123456789+01:30')?.toISOString(), '2026-11-23T06:30:00.123Z')
  t.equal(parseDateTime('0099-01-01T00:00:00Z')?.toISOString(), '0099-01-01T00:00:00.000Z', 'not 1999')
  t.equal(parseDateTime('0001-01-01T00:00:00Z')?.toISOString(), '0001-01-01T00:00:00.000Z', 'the first instant')
  t.equal(parseDateTime('0001-01-01T00:30:00-01:00')?.toISOString(), '0001-01-01T01:30:00.000Z')
  t.equal(parseDateTime('9999-12-31T23:59:59.999Z')?.toISOString(), '9999-12-31T23:59:59.999Z', 'the last one')
  t.equal(parseDateTime('2024-02-29T00:00:00Z')?.toISOString(), '2024-02-29T00:00:00.000Z', 'a leap day')
})

t.test('parseDateTime: null outside 0001–9999 in UTC, for days that do not exist, and for other forms', async (t) => {
  for (const text of [
    '0000-01-01T00:00:00Z',
    '0001-01-01T00:30:00+01:00',
    '9999-12-31T23:30:00-01:00',
    '2026-02-29T00:00:00Z',
    '2026-13-01T00:00:00Z',
    '2026-11-31T00:00:00Z',
    '2026-11-23T24:00:00Z',
    '2026-11-23T23:60:00Z',
    '2026-12-31T23:59:60Z',
    '2026-11-23T08:00:00+24:00',
    '2026-11-23T08:00:00+01:60',
    '2026-11-23T08:00:00',
    '2026-11-23 08:00:00Z',
    '2026-11-23T08:00:00+0100',
    '+002026-11-23T08:00:00Z',
    '2026-11-23',
    '',
  ])
    t.equal(parseDateTime(text), null, text)
})

t.test('parseDate: days that exist, 0001-01-01 to 9999-12-31', async (t) => {
  for (const text of ['0001-01-01', '2024-02-29', '9999-12-31']) t.equal(parseDate(text), text)
  for (const text of [
    '0000-01-01',
    '0000-02-29',
    '2026-02-29',
    '2026-00-10',
    '2026-1-1',
    '10000-01-01',
    '2026-11-23T00:00:00Z',
  ])
    t.equal(parseDate(text), null, text)
  t.equal(utcDate(parseDateTime('0001-01-01T23:30:00-01:00')!), '0001-01-02')
})

t.test('finerThanMilliseconds: digits past the millisecond that parseDateTime drops', async (t) => {
  for (const text of ['2026-11-23T08:00:00.0009Z', '2026-11-23T08:00:00.000000001+01:00', '2026-11-23T08:00:00.1231Z'])
    t.equal(finerThanMilliseconds(text), true, text)
  for (const text of ['2026-11-23T08:00:00Z', '2026-11-23T08:00:00.5Z', '2026-11-23T08:00:00.123000000Z', 'soon'])
    t.equal(finerThanMilliseconds(text), false, text)
})
