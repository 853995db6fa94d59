// Calls of the meter's flush made while one runs share a single flush after it (src/usage/meter.ts):
// each quota's month read asks for one (src/limits/quota-limit.ts), and at a month's start a
// replica with thousands of quotas made as many flushes one after another, each a write to
// Postgres, while those quotas waited. Whatever was counted before a call is written when it settles.
import { pino } from 'pino'
import t from 'tap'
import { UsageMeter } from '../../src/usage/meter.js'
import { freshDatabase } from '../helpers/db.js'
import { createParent } from '../helpers/gateway.js'

const database = await freshDatabase(t)

t.test('a hundred calls during a flush are one flush after it, which writes what they counted', async (t) => {
  const parent = await createParent(database.sql, { name: 'sharing' })
  const meter = new UsageMeter({ sql: database.sql, log: pino({ level: 'silent' }) })
  t.teardown(() => meter.close())
  // Counts the meter's writes, and holds the first until the hundred calls are made.
  const internals = meter as unknown as { write: () => Promise<void> }
  const write = internals.write.bind(meter)
  let writes = 0
  let release!: () => void
  const held = new Promise<void>((resolve) => (release = resolve))
  internals.write = async () => {
    writes++
    if (writes === 1) await held
    return write()
  }

  meter.record(parent.id, 200, true, parent.keyId)
  const first = meter.flush()
  meter.record(parent.id, 200, true, parent.keyId)
  const calls = Array.from({ length: 100 }, () => meter.flush())
  release()
  await Promise.all([first, ...calls])

  t.equal(writes, 2, 'the first flush, then one for every call made during it')
  const [row] = await database.sql<{ n: string }[]>`
    select coalesce(sum(requests), 0)::text as n from usage_daily where tenant_id = ${parent.id}`
  t.equal(row!.n, '2', 'both requests are written once the calls settle')
})
