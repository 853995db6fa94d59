// The embedded database's bootstrap account (src/bootstrap.ts;
// docs/decisions/0167-the-embedded-bootstrap-account-writes-what.md): it stands in for the
// operator's `accounts create`, and its audit log opens as that command's does, with the first
// key's api_key.created by the operator. Run here on the real Postgres; the embedded start itself
// is test/integration/embedded.test.ts.
import t from 'tap'
import { bootstrapEmbedded } from '../../src/bootstrap.js'
import { checkNoSecrets, eventsOf } from '../helpers/events.js'
import { freshDatabase } from '../helpers/db.js'

const LINE = /^bootstrap parent account ([0-9a-f-]{36}) key (tgw_[0-9A-Za-z]{49})\n$/

t.test('the bootstrap account: its first key is its first event, by the operator, once', async (t) => {
  const { sql } = await freshDatabase(t)
  const printed: string[] = []
  await bootstrapEmbedded(sql, (line) => printed.push(line))
  t.equal(printed.length, 1, 'one line')
  const [, accountId, apiKey] = LINE.exec(printed[0]!) ?? []
  t.ok(accountId, 'the line names the account and its key')

  const [key] = await sql<{ id: string }[]>`select id from api_keys where tenant_id = ${accountId!}`
  const events = await eventsOf(sql, accountId!)
  t.equal(events.length, 1, 'one event')
  t.match(events[0], {
    type: 'api_key.created',
    account_id: accountId,
    actor: { type: 'operator', key_id: null },
    source_ip: null,
    request_id: /^[0-9a-f-]{36}$/,
    target: { type: 'api_key', id: key!.id },
    data: { object: { id: key!.id, name: 'initial', sub_account_id: null, status: 'active' }, previous: null },
  })
  await checkNoSecrets(t, sql, [apiKey!])

  await bootstrapEmbedded(sql, (line) => printed.push(line))
  t.equal(printed.length, 1, 'a second start prints nothing')
  t.equal(Number((await sql`select count(*)::int as n from tenants`)[0]!.n), 1, 'and makes no account')
  t.equal(Number((await sql`select count(*)::int as n from events`)[0]!.n), 1, 'nor an event')
})
