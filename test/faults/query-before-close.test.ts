// A query handed to a pooled connection between its socket's error and its close: a reset
// (ECONNRESET) is reported a turn of the event loop before the close, and the pool still counts
// the connection as open until the close. postgres.js 3.4.9 settled such a query never: the close
// settled only what an error had not already, when no error came first. So a webhook worker's
// claim, made by its timer in that turn, hung for good, and its stop with it (seen once in about
// ten runs of postgres-reset.test.ts). scripts/patch-postgres.mjs mends it.
import { connect, type Socket } from 'node:net'
import postgres from 'postgres'
import t from 'tap'
import { freshDatabase } from '../helpers/db.js'
import { orTimeout } from '../helpers/poll.js'
import { watchCrashes } from './crashes.js'
import { postgresAddress, startRelay } from './relay.js'

const crashes = watchCrashes(t)
const db = await freshDatabase(t, { migrated: false })
const relay = await startRelay(t, postgresAddress())

t.test('a query made between a reset and the close is refused, not lost', async (t) => {
  // The pool's socket is made here, so that the test hears its error after postgres.js does.
  let socket: Socket | null = null
  // postgres.js's `socket` option (its README) is missing from its types; a variable passes it.
  const options = {
    max: 1,
    fetch_types: false,
    onnotice: () => {},
    socket: async () => {
      const made = connect(relay.port, '127.0.0.1')
      await new Promise<void>((resolve, reject) => made.once('connect', resolve).once('error', reject))
      socket = made
      return made
    },
  }
  const pool = postgres(db.url, options)
  t.teardown(() => pool.end({ timeout: 1 }))
  t.same(await pool`select 1 as one`, [{ one: 1 }], 'the pool works through the relay')
  if (socket === null) throw new Error('the pool made no socket')

  const made = socket as Socket
  // Made once postgres.js has heard the reset: its close comes in a later turn.
  const between = new Promise<string>((resolve) =>
    made.once('error', () =>
      resolve(
        pool`select 2 as two`.then(
          () => 'answered',
          (err: { code?: string }) => String(err.code),
        ),
      ),
    ),
  )
  await relay.cut('rst')
  const outcome = await orTimeout(between, 5_000, 'never settled')
  t.equal(outcome, 'CONNECTION_CLOSED', 'the query is refused as its connection closes')
  t.same(crashes, [], 'nothing escaped to the process')

  await relay.restore()
  t.same(await pool`select 3 as three`, [{ three: 3 }], 'the pool works again once the relay does')
})
