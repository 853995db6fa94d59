// withDeadline() (src/store/db.ts): the deadline of Postgres lookups, /readyz and management calls.
// Its failure has consequences beyond the one call (a lookup that misses it makes the cache skip
// Postgres for a second), so a late call must really be late, not merely found late by a timer.
import t from 'tap'
import { openStore, QueryTimeoutError, withDeadline } from '../../src/store/db.js'
import { freshDatabase } from '../helpers/db.js'

const db = await freshDatabase(t, { migrated: false })
const store = await openStore({ databaseUrl: db.url, dataDir: '.', maxConnections: 1 })
t.teardown(() => store.close())
const { sql } = store
await sql`select 1` // the connection is open before any timing below

/** Blocks the event loop, as a long GC pause or a burst of CPU work does. */
function blockFor(ms: number): void {
  const until = Date.now() + ms
  while (Date.now() < until) {
    // busy
  }
}

t.test('an answer that arrived while the event loop was blocked is taken, not called late', async (t) => {
  // Once before: a statement's first run prepares it (a round trip more).
  await sql`select ${-1}::int as n`
  for (let round = 0; round < 5; round++) {
    const answer = withDeadline(sql<{ n: number }[]>`select ${round}::int as n`, 50)
    // postgres.js starts a query a microtask later and writes it from a setImmediate. Once that
    // is queued, the loop is blocked from a setImmediate queued behind it: the query is written,
    // then nothing runs past the deadline while Postgres answers. Afterwards Node runs the expired
    // deadline timer before it reads the socket that holds the answer.
    for (let tick = 0; tick < 5; tick++) await null
    await new Promise<void>((resolve) =>
      setImmediate(() => {
        blockFor(200)
        resolve()
      }),
    )
    const outcome = await answer.then(
      (rows) => rows[0]!.n,
      (err: unknown) => err,
    )
    t.equal(
      outcome,
      round,
      `round ${round}: the answer, not ${outcome instanceof Error ? outcome.message : 'a timeout'}`,
    )
  }
})

t.test('a query that really takes longer fails at its deadline, and is not cancelled', async (t) => {
  const started = Date.now()
  const slow = sql`select pg_sleep(0.3)`
  const outcome = await withDeadline(slow, 50).then(
    () => null,
    (err: unknown) => err,
  )
  t.type(outcome, QueryTimeoutError, 'QueryTimeoutError')
  t.equal((outcome as QueryTimeoutError).code, 'QUERY_TIMEOUT')
  t.ok(Date.now() - started < 250, `it fails before the query ends (${Date.now() - started} ms)`)
  await t.resolves(slow, 'the query itself still ends normally (nothing cancelled it)')
})
