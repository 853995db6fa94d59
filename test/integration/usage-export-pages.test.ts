// The export's pages after the first each run in their parent's turn (management/heavy-reads.ts,
// heavyReadTurn): exportRows hands each later page's statement to `laterPage`, so that a stream read
// fast takes no more of the heavy reads' connections than its parent's share; its first page runs
// in the call's own place.
import t from 'tap'
import { exportRows } from '../../src/store/usage-periods.js'
import { freshDatabase } from '../helpers/db.js'
import { createParent } from '../helpers/gateway.js'

const database = await freshDatabase(t)

t.test('every page after the first is read through laterPage; the first is not', async (t) => {
  const parent = await createParent(database.sql, { name: 'pages' })
  const start = new Date(Date.UTC(2026, 0, 1))
  for (const meter of ['a', 'b', 'c', 'd', 'e'])
    await database.sql`
      insert into usage_period_units (tenant_id, period_start, meter, units, requests)
      values (${parent.id}, ${start}, ${meter}, 1, 1)`
  let later = 0
  const meters: string[] = []
  const range = { from: start, to: new Date(start.getTime() + 3_600_000), accountId: parent.id }
  for await (const page of exportRows(database.sql, range, 2, (work) => {
    later++
    return work()
  }))
    meters.push(...page.map((row) => row.meter))
  t.same(meters, ['a', 'b', 'c', 'd', 'e'], 'every record once, in order')
  t.equal(later, 2, 'the second and third pages went through laterPage')
})
