// A transaction whose connection is lost while its callback awaits something other than a query
// (a signing key being generated, say), which then goes on (src/store/transaction.ts): postgres.js
// would write the next query, or the COMMIT, to the closed socket, an uncaught TypeError that ends
// the process. The connection is ended by Postgres itself (pg_terminate_backend).
import postgres from 'postgres'
import t from 'tap'
import { inTransaction } from '../../src/store/transaction.js'
import { freshDatabase } from '../helpers/db.js'
import { watchCrashes } from './crashes.js'

const crashes = watchCrashes(t)
const db = await freshDatabase(t, { migrated: false })
await db.sql`create table written (n int)`
const pool = postgres(db.url, { max: 2, fetch_types: false, onnotice: () => {} })
t.teardown(() => pool.end({ timeout: 1 }))
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

for (const [what, goOn] of [
  ['makes another query', async (tx: postgres.TransactionSql) => void (await tx`insert into written values (2)`)],
  ['ends without one (COMMIT)', async () => {}],
] as const) {
  t.test(`the connection lost while the callback waits, which then ${what}`, async (t) => {
    const name = `lost ${what}`
    const outcome = await inTransaction(pool, async (tx) => {
      await tx`select set_config('application_name', ${name}, false)`
      await tx`insert into written values (1)`
      await db.sql`select pg_terminate_backend(pid) from pg_stat_activity where application_name = ${name}`
      await sleep(100) // not a query: the connection closes meanwhile
      await goOn(tx)
    }).then(
      () => 'committed',
      (err: { code?: string }) => err.code,
    )
    t.equal(outcome, 'CONNECTION_CLOSED', 'the transaction fails with the connection')
    // sql.begin() rejects as the connection closes; the callback goes on 100 ms after.
    await sleep(300)
    t.same(crashes, [], 'nothing escaped to the process')
    t.same(await db.sql`select n from written`, [], 'nothing was written')
    t.equal(await inTransaction(pool, async (tx) => (await tx`select 1 as one`)[0]?.one), 1, 'the next one works')
  })
}
