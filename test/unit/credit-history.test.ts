// A sub-account's credits over time (management/credit-history.ts), as plain functions of its
// grants and burn log: the units left before the range summed into `start`, each change in time
// order, burns at their bucket's end (now for the open one), what a grant had left gone at its
// void or expiry, a grant's debt paid never counted, and the buckets' size.
import t from 'tap'
import { burnBucketSeconds, creditHistory, MAX_BURN_POINTS } from '../../src/management/credit-history.js'
import type { GrantHistoryRow } from '../../src/store/credit-history.js'

const DAY = 86_400_000
const HOUR = 3_600_000
const from = Date.parse('2026-11-01T00:00:00Z')

function grant(id: string, fields: Partial<GrantHistoryRow> & { at: number }): GrantHistoryRow {
  const { at, ...rest } = fields
  return {
    id,
    meter: 'tokens',
    units: 100,
    debt_paid: 0,
    units_left: 100,
    created_at: new Date(at),
    expires_at: null,
    voided_at: null,
    ...rest,
  }
}

const range = (endMs: number, bucketSeconds = 3600) => ({ fromMs: from, endMs, nowMs: endMs, bucketSeconds })
const brief = (points: { kind: string; change: number; units_left: number; at: string }[]) =>
  points.map((p) => `${p.at.slice(8, 16)} ${p.kind} ${p.change} ${p.units_left}`)

t.test('start sums what came before the range; changes follow in time order; end is the range end', async (t) => {
  const grants = [
    grant('a', { at: from - DAY, units: 500, units_left: 200 }),
    grant('b', { at: from + 2 * HOUR + 60_000, units: 300, units_left: 300 }),
  ]
  const burns = [
    { meter: 'tokens', bucket: null, units: 250 },
    { meter: 'tokens', bucket: 0, units: 40 },
    { meter: 'tokens', bucket: 4, units: 10 },
  ]
  const end = from + 4 * HOUR + 30 * 60_000 // inside bucket 4: its burns are placed now
  const [tokens] = creditHistory(grants, burns, [], new Map(), range(end))
  t.same(brief(tokens!.points), [
    '01T00:00 start 0 250',
    '01T01:00 burned -40 210',
    '01T02:01 granted 300 510',
    '01T04:30 burned -10 500',
    '01T04:30 end 0 500',
  ])
  t.equal(tokens!.owed_units, 0)
})

t.test('a void and an expiry take what was left then; a grant that paid a debt adds the rest', async (t) => {
  const grants = [
    grant('v', { at: from + HOUR, units: 100, units_left: 60, voided_at: new Date(from + 3 * HOUR) }),
    grant('x', { at: from + HOUR, units: 50, units_left: 5, expires_at: new Date(from + 5 * HOUR) }),
    grant('d', { at: from + 2 * HOUR, units: 100, debt_paid: 30, units_left: 70 }),
    // Expires after the end: still live, nothing gone yet.
    grant('later', { at: from + 2 * HOUR, units: 10, units_left: 10, expires_at: new Date(from + 9 * HOUR) }),
    // Voided after it expired: gone at its expiry. Nothing left: no point.
    grant('empty', { at: from, units: 10, units_left: 0, expires_at: new Date(from + HOUR) }),
  ]
  const burns = [{ meter: 'tokens', bucket: 1, units: 85 }]
  const [tokens] = creditHistory(grants, burns, [], new Map([['tokens', 7]]), range(from + 6 * HOUR))
  t.same(brief(tokens!.points), [
    '01T00:00 start 0 0',
    '01T00:00 granted 10 10',
    '01T01:00 granted 100 110',
    '01T01:00 granted 50 160',
    '01T02:00 granted 70 230',
    '01T02:00 granted 10 240',
    '01T02:00 burned -85 155',
    '01T03:00 voided -60 95',
    '01T05:00 expired -5 90',
    '01T06:00 end 0 90',
  ])
  t.equal(tokens!.owed_units, 7, 'the debt is said beside the points')
  t.same(
    tokens!.points.filter((p) => p.grant_id !== null).map((p) => p.grant_id),
    ['empty', 'v', 'x', 'd', 'later', 'v', 'x'],
  )
})

t.test('changes after the end are left out; a credit limit with no grant is a flat line', async (t) => {
  const end = from + 2 * HOUR
  const grants = [grant('a', { at: from + HOUR }), grant('late', { at: from + 3 * HOUR })]
  const meters = creditHistory(grants, [{ meter: 'tokens', bucket: 5, units: 1 }], ['calls', 'tokens'], new Map(), {
    ...range(end),
    nowMs: end + DAY,
  })
  t.same(
    meters.map((m) => m.meter),
    ['calls', 'tokens'],
  )
  t.same(brief(meters[0]!.points), ['01T00:00 start 0 0', '01T02:00 end 0 0'])
  t.same(brief(meters[1]!.points), ['01T00:00 start 0 0', '01T01:00 granted 100 100', '01T02:00 end 0 100'])
})

t.test('buckets: whole periods, as few as keep a range within the bound', async (t) => {
  t.equal(burnBucketSeconds(3600, from, from + 31 * DAY), 3600, 'a month of hours: one period a bucket')
  t.equal(burnBucketSeconds(3600, from, from + 366 * DAY), 9 * 3600, 'a year of hours: nine')
  const minutes = burnBucketSeconds(60, from, from + 31 * DAY)
  t.equal(minutes % 60, 0)
  t.ok((31 * DAY) / 1000 / minutes <= MAX_BURN_POINTS, 'a month of minutes within the bound')
})
