// Usage counted per period (docs/configuration.md, USAGE_PERIOD_SECONDS; docs/api.md, Units) on
// the real Postgres, with the meter's clock in the test's hands: units land in the period of their
// request, the periods of a day add up to its day in the usage counts, and a key's units by day.
import { pino } from 'pino'
import t from 'tap'
import { UsageMeter } from '../../src/usage/meter.js'
import { freshDatabase } from '../helpers/db.js'
import { createParent } from '../helpers/gateway.js'

const database = await freshDatabase(t)
const sql = database.sql
const KEY = '7b1d2c9e-1f0a-4c55-9d43-0a1b2c3d4e5f'

t.test('a period of a minute: units by minute, requests by day, units by key and day', async (t) => {
  const tenant = await createParent(sql, { name: 'periods' })
  let now = Date.UTC(2026, 10, 26, 23, 58, 30)
  const meter = new UsageMeter({ sql, log: pino({ level: 'silent' }), periodSeconds: 60, now: () => now })
  meter.record(tenant.id, 200, true, KEY, 3, new Map([['tokens', 10]]))
  now += 60_000 // 23:59:30
  meter.record(tenant.id, 200, true, KEY, 3, new Map([['tokens', 5]]))
  meter.record(tenant.id, 404, false, KEY) // a refusal: a request, no units
  now += 60_000 // the next day, 00:00:30
  meter.record(tenant.id, 200, true, KEY, 3)
  await meter.flush()

  const periods = await sql<{ start: string; meter: string; units: string; requests: string }[]>`
    select to_char(period_start at time zone 'UTC', 'YYYY-MM-DD HH24:MI') as start, meter, units::text, requests::text
    from usage_period_units where tenant_id = ${tenant.id} order by period_start, meter`
  t.same(
    periods.map((p) => [p.start, p.meter, Number(p.units), Number(p.requests)]),
    [
      ['2026-11-26 23:58', 'requests', 3, 1],
      ['2026-11-26 23:58', 'tokens', 10, 1],
      ['2026-11-26 23:59', 'requests', 3, 1],
      ['2026-11-26 23:59', 'tokens', 5, 1],
      ['2026-11-27 00:00', 'requests', 3, 1],
    ],
    'each request in the minute it came, each meter apart',
  )
  const days = await sql<{ day: string; requests: string; forwarded: string }[]>`
    select day::text, sum(requests)::text as requests, sum(forwarded)::text as forwarded
    from usage_daily where tenant_id = ${tenant.id} group by day order by day`
  t.same(
    days.map((d) => [d.day, Number(d.requests), Number(d.forwarded)]),
    [
      ['2026-11-26', 3, 2],
      ['2026-11-27', 1, 1],
    ],
    'the minutes of a day add up to it',
  )
  const byKey = await sql<{ day: string; meter: string; units: string }[]>`
    select day::text, meter, units::text from usage_daily_key_units
    where tenant_id = ${tenant.id} and key_id = ${KEY} order by day, meter`
  t.same(
    byKey.map((k) => [k.day, k.meter, Number(k.units)]),
    [
      ['2026-11-26', 'requests', 6],
      ['2026-11-26', 'tokens', 15],
      ['2026-11-27', 'requests', 3],
    ],
  )
})
