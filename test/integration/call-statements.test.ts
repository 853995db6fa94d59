// Statements that end with their call (src/store/call-statements.ts), on a real Postgres: those
// made within `stoppedBy` are cancelled when its signal aborts, in Postgres as in the pool's
// queue and in a transaction; one made afterwards fails at once; a fragment is left alone, and
// statements made outside any call are never touched.
import v8 from 'node:v8'
import { runInNewContext } from 'node:vm'
import t from 'tap'
import postgres from 'postgres'
import { cancellable, StatementsStoppedError, stoppedBy, unstoppable } from '../../src/store/call-statements.js'
import { freshDatabase } from '../helpers/db.js'
import { until } from '../helpers/poll.js'
import { tcpRelay } from '../helpers/tcp-relay.js'

const db = await freshDatabase(t, { migrated: false })
const pool = postgres(db.url, {
  max: 1,
  fetch_types: false,
  onnotice: () => {},
  connection: { application_name: 'call statements' },
})
t.teardown(() => pool.end({ timeout: 1 }))
const sql = cancellable(pool)

const sleeping = async () => {
  const [row] = await db.sql<{ n: number }[]>`
    select count(*)::int as n from pg_stat_activity where application_name = 'call statements' and query like '%pg_sleep%' and state = 'active'`
  return row!.n
}

t.test('an abort cancels what runs, what waits for a connection, and what comes after', async (t) => {
  const stop = new AbortController()
  const outcome = stoppedBy(stop.signal, async () => {
    const fragment = sql`pg_sleep(0)`
    const running = sql`select pg_sleep(30) as slept`.then(
      () => 'answered',
      (err: { code?: string }) => err.code,
    )
    const queued = sql.unsafe('select pg_sleep(30)').then(
      () => 'answered',
      (err: { code?: string }) => err.code,
    )
    t.ok(await until(10_000, async () => (await sleeping()) === 1), 'the first statement runs')
    stop.abort(new Error('503'))
    const ended = await Promise.all([running, queued])
    t.throws(() => sql`select 1`, StatementsStoppedError, 'a statement made afterwards fails at once')
    t.ok(fragment, 'a fragment is left as it was')
    return ended
  })
  t.same(await outcome, ['57014', '57014'], 'both cancelled: the one in Postgres, the one queued')
  t.equal(await sleeping(), 0, 'nothing of the call runs on')
  t.same(await sql`select 1 as one`, [{ one: 1 }], 'outside a call, statements run as ever')
})

t.test("a transaction's statements are cancelled too", async (t) => {
  const stop = new AbortController()
  const outcome = stoppedBy(stop.signal, () =>
    sql.begin(async (tx) => {
      await tx`select 1`
      return tx`select pg_sleep(30)`
    }),
  ).then(
    () => 'answered',
    (err: { code?: string }) => err.code,
  )
  t.ok(await until(10_000, async () => (await sleeping()) === 1), 'the statement runs')
  stop.abort()
  t.equal(await outcome, '57014')
  t.equal(await sleeping(), 0)
})

t.test('a cancel that reaches Postgres before the statement does is sent again', async (t) => {
  // The statement's bytes are held between the pool and Postgres; the cancel, on a connection of
  // its own, is not: Postgres gets the cancel while its backend waits for a statement, and drops
  // it. Only a cancel sent again stops the statement, which would otherwise sleep its 30 s.
  const url = new URL(db.url)
  const relay = await tcpRelay(t, Number(url.port || 5432))
  url.port = String(relay.port)
  const own = postgres(url.toString(), {
    max: 1,
    fetch_types: false,
    onnotice: () => {},
    connection: { application_name: 'call statements' },
  })
  t.teardown(() => own.end({ timeout: 1 }))
  const ownSql = cancellable(own)
  await ownSql`select 1`
  const stop = new AbortController()
  relay.hold()
  const outcome = stoppedBy(stop.signal, () =>
    ownSql`select pg_sleep(30)`.then(
      () => 'answered',
      (err: { code?: string }) => err.code,
    ),
  )
  t.ok(await until(10_000, async () => relay.connections.heldBytes > 0), 'the statement is sent, not received')
  const { opened, closed } = relay.connections
  stop.abort()
  // The first cancel's connection has come and gone: Postgres has had it, with nothing to cancel.
  t.ok(
    await until(10_000, async () => relay.connections.opened > opened && relay.connections.closed > closed),
    'the first cancel reached Postgres first',
  )
  relay.release()
  t.ok(
    await until(10_000, async () => relay.connections.opened > opened + 1 && (await sleeping()) === 0),
    'a second cancel stopped it',
  )
  t.equal(await outcome, '57014', 'the statement is cancelled all the same')
})

t.test('a statement made before the stop and awaited after it never reaches Postgres', async (t) => {
  const stop = new AbortController()
  let resume!: () => void
  const paused = new Promise<void>((resolve) => {
    resume = resolve
  })
  const outcome = stoppedBy(stop.signal, async () => {
    const made = sql`select pg_sleep(30) as slept`
    await paused
    return made.then(
      () => 'answered',
      (err: { code?: string }) => err.code,
    )
  })
  stop.abort()
  resume()
  t.equal(await outcome, '57014', 'refused as a statement made after the stop')
  t.equal(await sleeping(), 0, 'nothing of it runs')
  t.same(await sql`select 1 as one`, [{ one: 1 }], 'the pool serves on')
})

t.test('an aborted signal stops the call before its first statement', async (t) => {
  const stop = new AbortController()
  stop.abort()
  await t.rejects(
    stoppedBy(stop.signal, async () => sql`select 1`),
    StatementsStoppedError,
  )
})

t.test('work that is no promise: a throw goes to the caller, a value is returned as it is', async (t) => {
  const stop = new AbortController()
  t.throws(
    () =>
      stoppedBy(stop.signal, () => {
        throw new Error('at once')
      }),
    /at once/,
  )
  // A handler that answers later through its reply: its statements stay stoppable.
  let later!: Promise<unknown>
  t.equal(
    stoppedBy(stop.signal, () => {
      later = sql`select pg_sleep(30)`.then(
        () => 'ran',
        (err: { code?: string }) => err.code,
      )
      return 'answered later'
    }),
    'answered later',
  )
  stop.abort()
  t.equal(await later, '57014', 'cancelled when its call is stopped')
})

t.test('a statement made once the work has settled, in its async context, is not held by the call', async (t) => {
  const stop = new AbortController()
  const own = postgres(db.url, { max: 1, fetch_types: false, onnotice: () => {} })
  t.teardown(() => own.end({ timeout: 1 }))
  const ownSql = cancellable(own)
  // The work answers with a stream read on afterwards (a key import): its later statements are
  // made in the work's async context, after it settled. Each one held would keep its rows.
  let made!: WeakRef<object>
  let ran!: Promise<number>
  await stoppedBy(stop.signal, async () => {
    ran = new Promise<void>((resolve) => setTimeout(resolve, 20)).then(async () => {
      const query = ownSql`select generate_series(1, 1000) as n`
      made = new WeakRef(query)
      return (await query).length
    })
    return 'answered'
  })
  t.equal(await ran, 1000, 'it ran')
  v8.setFlagsFromString('--expose-gc')
  const gc = runInNewContext('gc') as () => void
  const collected = await until(5_000, async () => {
    gc()
    return made.deref() === undefined
  })
  t.ok(collected, 'the statement, and its rows, are let go')
})

t.test('a call made unstoppable holds no statement, while its work is still under way', async (t) => {
  const stop = new AbortController()
  const own = postgres(db.url, { max: 1, fetch_types: false, onnotice: () => {} })
  t.teardown(() => own.end({ timeout: 1 }))
  const ownSql = cancellable(own)
  v8.setFlagsFromString('--expose-gc')
  const gc = runInNewContext('gc') as () => void
  // The work settles only once its answer is sent (a handler that returns its reply, a key
  // import's stream): its statements after `unstoppable` are let go while it runs.
  let made!: WeakRef<object>
  let collected = false
  await stoppedBy(stop.signal, async () => {
    await ownSql`select 1 as n`
    unstoppable()
    // In a function of its own: the work's own scope, suspended below, holds no reference to it.
    const rows = async () => {
      const query = ownSql`select generate_series(1, 1000) as n`
      made = new WeakRef(query)
      return (await query).length
    }
    t.equal(await rows(), 1000, 'it ran')
    collected = await until(5_000, async () => {
      gc()
      return made.deref() === undefined
    })
  })
  t.ok(collected, 'the statement, and its rows, are let go before the work settles')
})
