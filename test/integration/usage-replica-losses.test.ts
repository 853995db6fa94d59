// A replica the close stops waiting for is recorded as lost (store/usage-periods.ts), and a replica
// that comes back clears its record with its next flush, whatever it carries (store/usage.ts):
// against the real Postgres, with the store's own statements.
import { randomUUID } from 'node:crypto'
import t from 'tap'
import { createSubAccount } from '../../src/store/tenants.js'
import { addUsage } from '../../src/store/usage.js'
import { closePeriods, replicaLost } from '../../src/store/usage-periods.js'
import { freshDatabase } from '../helpers/db.js'
import { createParent } from '../helpers/gateway.js'

const db = await freshDatabase(t)
const sql = db.sql
const losses = async () =>
  (await sql<{ replica_id: string }[]>`select replica_id from usage_replica_losses`).map((r) => r.replica_id)

/** A replica last heard from `secondsAgo` ago, its counts in up to then. */
async function silentReplica(secondsAgo: number): Promise<string> {
  const id = randomUUID()
  await sql`insert into usage_flush_marks (replica_id, flushed_through, seen_at)
    values (${id}, now() - make_interval(secs => ${secondsAgo}), now() - make_interval(secs => ${secondsAgo}))`
  return id
}
const close = () => closePeriods(sql, { periodSeconds: 60, graceSeconds: 1, liveReplicaSeconds: 30 })

t.test('not heard from past the live window: recorded as lost, once, and not waited for', async (t) => {
  const live = await silentReplica(5)
  const gone = await silentReplica(45)
  await close()
  await close()
  t.same(await losses(), [gone], 'the silent one, once')
  const marks = (await sql<{ replica_id: string }[]>`select replica_id from usage_flush_marks`).map((r) => r.replica_id)
  t.same(marks, [live], 'its mark is gone: the close no longer waits for it')
  const from = new Date(Date.now() - 3_600_000)
  const to = new Date(Date.now() + 3_600_000)
  t.ok(await replicaLost(sql, { from, to, closedUntil: to }), 'a range it served finds the loss')
  t.notOk(await replicaLost(sql, { from, to, closedUntil: null }), 'none closed: nothing to explain yet')
  t.notOk(
    await replicaLost(sql, { from: new Date(Date.now() + 600_000), to, closedUntil: to }),
    'a range after it does not',
  )
})

t.test('a replica taken for lost that flushes again clears its record', async (t) => {
  const [gone] = await losses()
  // An empty flush moves its mark alone.
  await addUsage(sql, randomUUID(), { counts: [], mark: { replicaId: gone!, through: new Date() } })
  t.same(await losses(), [], 'an empty flush clears it')
  const other = await silentReplica(45)
  await close()
  t.same(await losses(), [other])
  // A flush with counts.
  const parent = await createParent(sql)
  const sub = await createSubAccount(sql, parent.id, { name: 's', externalId: null, metadata: {} })
  const day = new Date().toISOString().slice(0, 10)
  await addUsage(sql, randomUUID(), {
    counts: [{ tenantId: sub.id, day, statusClass: 2, requests: 1, forwarded: 1 }],
    mark: { replicaId: other, through: new Date() },
  })
  t.same(await losses(), [], 'a flush with counts clears it too')
})
