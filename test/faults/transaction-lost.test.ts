// A transaction whose connection is lost while its callback awaits something other than a query
// (a signing key being generated, say), which then goes on: postgres.js 3.4.9 would write the next
// query, or the COMMIT, to the closed socket, an uncaught TypeError that ends the process, and that
// connection would never write again. Through src/store/transaction.ts's guard, and through plain
// sql.begin with postgres.js as installed (scripts/patch-postgres.mjs mends it). The connection is
// ended by Postgres itself (pg_terminate_backend).
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
const codeOf = (err: unknown) => String((err as { code?: unknown }).code)
const CONNECTION_LOST = ['CONNECTION_CLOSED', 'CONNECTION_DESTROYED', 'ECONNRESET', 'EPIPE']

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

// One connection: the one lost is the one the next transaction gets.
const single = postgres(db.url, { max: 1, fetch_types: false, onnotice: () => {} })
t.teardown(() => single.end({ timeout: 1 }))

for (const [what, goOn] of [
  ['makes another query', async (tx: postgres.TransactionSql) => void (await tx`insert into written values (2)`)],
  ['ends without one (COMMIT)', async () => {}],
  ['fails (ROLLBACK)', async () => Promise.reject(new Error('the callback failed'))],
] as const) {
  t.test(`sql.begin whose connection is lost while the callback waits, which then ${what}`, async (t) => {
    const name = `unguarded ${what}`
    let afterLoss: string | null = null
    const outcome = await single
      .begin(async (tx) => {
        await tx`select set_config('application_name', ${name}, false)`
        await tx`insert into written values (1)`
        await db.sql`select pg_terminate_backend(pid) from pg_stat_activity where application_name = ${name}`
        await sleep(100) // not a query: the connection closes meanwhile
        await goOn(tx).then(
          () => (afterLoss = 'went on'),
          (err) => {
            afterLoss = codeOf(err)
            throw err
          },
        )
      })
      .then(() => 'committed', codeOf)
    t.equal(outcome, 'CONNECTION_CLOSED', 'the transaction fails with the connection')
    await sleep(300) // a write on the closed socket would run in a setImmediate by now
    t.same(crashes, [], 'nothing escaped to the process')
    // CONNECTION_CLOSED once the pool has seen the close; on a slow machine the query may go out first.
    if (what === 'makes another query')
      t.ok(CONNECTION_LOST.includes(String(afterLoss)), `the query after the loss is refused (${afterLoss})`)
    t.same(await db.sql`select n from written`, [], 'nothing was written')
    t.equal((await single`select 1 as one`)[0]?.one, 1, 'the pool serves the next query')
    t.equal((await single.begin(async (tx) => tx`select 2 as two`))[0]?.two, 2, 'and the next transaction')
  })
}
