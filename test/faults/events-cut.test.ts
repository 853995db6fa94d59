// A change whose Postgres connection is lost while it writes its event (docs/events.md): the
// relay closes the gateway's connection as it sends the statement that writes the sub-account and
// its event: alone, or, under an Idempotency-Key, in the middle of the change's transaction (after
// BEGIN, before the claim's mark and COMMIT). Either way neither the change nor its event exists,
// the client hears an error, nothing escapes to the process (src/store/transaction.ts), and the
// next request works.
import t from 'tap'
import { freshDatabase } from '../helpers/db.js'
import { createParent, startGateway } from '../helpers/gateway.js'
import { eventually, orTimeout } from '../helpers/poll.js'
import { watchCrashes } from './crashes.js'
import { postgresAddress, startRelay, viaPort } from './relay.js'

const crashes = watchCrashes(t)
const db = await freshDatabase(t)
const relay = await startRelay(t, postgresAddress())
const gw = await startGateway(t, {
  listen: false,
  database: db,
  pool: { url: viaPort(db.url, relay.port) },
  redis: false,
  relays: [relay],
})

for (const [how, idempotent] of [
  ['rst', false],
  ['fin', false],
  ['rst', true],
  ['fin', true],
] as const) {
  const what = idempotent ? 'in its transaction' : 'alone'
  t.test(`the connection lost at the change's statement, ${what} (${how})`, async (t) => {
    const parent = await createParent(db.sql, { name: `cut ${how} ${what}` })
    const call = (name: string) =>
      gw.call(parent.apiKey, {
        method: 'POST',
        url: '/v1/sub-accounts',
        acting: 'self',
        body: { name },
        headers: idempotent ? { 'idempotency-key': `cut ${name}` } : {},
      })
    // The event's type travels as a parameter of the statement, every time (its text is prepared
    // once per connection): the connection is cut as that statement is sent.
    const lost = relay.closeOn('sub_account.created', how)
    const answers = []
    for (let i = 0; i < 12; i++) {
      answers.push((await call(`${how} ${i}`)).statusCode)
      if (
        await orTimeout(
          lost.then(() => true),
          1,
          false,
        )
      )
        break
    }
    t.ok(
      await orTimeout(
        lost.then(() => true),
        5_000,
        false,
      ),
      'a connection was lost as the change was sent',
    )
    const failed = answers.at(-1)
    t.ok(failed !== undefined && failed >= 500, `the cut request failed (${answers.join(', ')})`)
    const [state] = await db.sql`
      select (select count(*) from tenants where parent_id = ${parent.id})::int as subs,
             (select count(*) from events where account_id = ${parent.id})::int as events`
    t.equal(state!.subs, answers.length - 1, 'the cut one made no sub-account')
    t.equal(state!.events, answers.length - 1, 'and no event: one for each that succeeded')
    t.same(crashes, [], 'nothing escaped to the process')
    const after = await eventually(10_000, async () => (await call(`${how} after`)).statusCode === 201, 100)
    t.not(after, null, 'the next change goes through')
  })
}
