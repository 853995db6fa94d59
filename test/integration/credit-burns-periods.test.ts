// A flush's units burn a sub-account's grants in the burn order, and the burn log (credit_burns)
// keeps what each grant gave to each usage period (docs/billing.md): the export's `data.credits` of
// a period is what that period's units took, also when one flush holds units of two periods (a
// flush across a period's end, a batch retried after an outage). store/usage.ts addUsage.
import { randomUUID } from 'node:crypto'
import t from 'tap'
import { addUsage } from '../../src/store/usage.js'
import { freshDatabase } from '../helpers/db.js'
import { createParent } from '../helpers/gateway.js'

const database = await freshDatabase(t)
const sql = database.sql

t.test("one flush of two periods' units: each period's burn is what its units took, grant by grant", async (t) => {
  const parent = await createParent(sql, { name: 'burns' })
  const [sub] = await sql<{ id: string }[]>`
    insert into tenants (id, parent_id, name) values (${randomUUID()}, ${parent.id}, 'sub') returning id`
  // Burned first (priority 1): 25 units, then the second grant.
  const first = randomUUID()
  const second = randomUUID()
  await sql`insert into credit_grants (id, sub_account_id, account_id, meter, units, units_left, priority)
    values (${first}, ${sub!.id}, ${parent.id}, 'tokens', 25, 25, 1),
           (${second}, ${sub!.id}, ${parent.id}, 'tokens', 100, 100, 2)`
  const ten = new Date(Date.UTC(2026, 10, 30, 10))
  const eleven = new Date(Date.UTC(2026, 10, 30, 11))
  const units = (period: Date, n: number) => ({
    tenantId: sub!.id,
    periodStart: period.toISOString(),
    meter: 'tokens',
    units: n,
    requests: 1,
  })
  t.ok(await addUsage(sql, randomUUID(), { counts: [], unitCounts: [units(ten, 10), units(eleven, 20)] }), 'applied')
  const burns = await sql<{ grant_id: string; period_start: Date; units: string }[]>`
    select grant_id, period_start, units::text from credit_burns order by period_start, grant_id = ${second}`
  t.same(
    burns.map((b) => [b.grant_id, b.period_start.toISOString(), Number(b.units)]),
    [
      [first, ten.toISOString(), 10],
      [first, eleven.toISOString(), 15],
      [second, eleven.toISOString(), 5],
    ],
    "10:00's 10 units from the first grant; 11:00's 20: the first's last 15, then 5 of the second",
  )
  const left = await sql<{ id: string; units_left: string }[]>`
    select id, units_left::text from credit_grants where sub_account_id = ${sub!.id} order by priority`
  t.same(
    left.map((g) => [g.id, Number(g.units_left)]),
    [
      [first, 0],
      [second, 95],
    ],
    'the grants burned 30 in all',
  )
})
