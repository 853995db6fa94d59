// Events of the operator's commands (docs/events.md): the actor is the operator, with no key and
// no address, and each command's events share a request id of its own; a command that changes
// nothing writes none. The commands run in process (test/helpers/cli.ts).
import t from 'tap'
import { cli } from '../helpers/cli.js'
import { freshDatabase } from '../helpers/db.js'
import { checkNoSecrets, eventsOf, newEvents } from '../helpers/events.js'

const db = await freshDatabase(t)
const { ok, fails } = cli({ DATABASE_URL: db.url })
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

const operator = { actor: { type: 'operator', key_id: null }, source_ip: null, request_id: UUID }

const created = await ok(t, ['accounts', 'create', '--name', 'Operated'])
const accountId: string = created.account.id

t.test('accounts create: the first key is the first event', async (t) => {
  const list = await eventsOf(db.sql, accountId)
  t.equal(list.length, 1)
  t.match(list[0], {
    ...operator,
    account_id: accountId,
    type: 'api_key.created',
    target: { type: 'api_key', id: created.key.id },
  })
  t.same(list[0].data, { object: { ...created.key, sub_account_id: null }, previous: null })
})

t.test('keys create, roll, revoke; a repeated revoke writes none', async (t) => {
  let seen = (await eventsOf(db.sql, accountId)).length
  const made = await ok(t, ['keys', 'create', '--account', accountId, '--name', 'second'])
  const [create, ...more] = await newEvents(db.sql, accountId, seen++)
  t.same(more, [])
  t.match(create, { ...operator, type: 'api_key.created', target: { id: made.key.id } })
  t.same(create.data.object, { ...made.key, sub_account_id: null })

  const rolled = await ok(t, [
    'keys',
    'roll',
    '--account',
    accountId,
    '--key',
    made.key.id,
    '--expires-in-seconds',
    '0',
  ])
  const [roll, ...rollMore] = await newEvents(db.sql, accountId, seen++)
  t.same(rollMore, [])
  t.match(roll, { ...operator, type: 'api_key.rolled', target: { id: rolled.key.id } })
  t.same(roll.data.object, { ...rolled.key, sub_account_id: null })
  t.match(roll.data.previous, { id: made.key.id, status: 'active', revoked_at: null })

  await ok(t, ['keys', 'revoke', '--account', accountId, '--key', rolled.key.id])
  const [revoke, ...revokeMore] = await newEvents(db.sql, accountId, seen++)
  t.same(revokeMore, [])
  t.match(revoke, { ...operator, type: 'api_key.revoked', target: { id: rolled.key.id } })
  t.not(revoke.request_id, roll.request_id, 'each command its own request id')

  await ok(t, ['keys', 'revoke', '--account', accountId, '--key', rolled.key.id])
  await ok(t, ['keys', 'revoke', '--account', accountId, '--key', made.key.id])
  t.same(await newEvents(db.sql, accountId, seen), [], 'revoking a revoked key (also by a roll): none')
  await checkNoSecrets(t, db.sql, [created.api_key, made.api_key, rolled.api_key])
})

t.test('accounts limits: account.limits_updated with the limits before; the same again, none', async (t) => {
  const seen = (await eventsOf(db.sql, accountId)).length
  const out = await ok(t, ['accounts', 'limits', '--account', accountId, '--rate', '5/1s'])
  const [limits, ...more] = await newEvents(db.sql, accountId, seen)
  t.same(more, [])
  t.match(limits, { ...operator, type: 'account.limits_updated', target: { type: 'account', id: accountId } })
  t.same(limits.data, {
    object: out.account,
    previous: { limits: { rate: null, monthly_quota: null } },
  })
  const [before] = await db.sql`select updated_at from tenants where id = ${accountId}`
  await ok(t, ['accounts', 'limits', '--account', accountId, '--rate', '5/1s'])
  t.same(await newEvents(db.sql, accountId, seen + 1), [], 'no change: no event')
  const [after] = await db.sql`select updated_at from tenants where id = ${accountId}`
  t.same(after, before, 'and the row is not written')
  await fails(t, ['accounts', 'limits', '--account', '00000000-0000-4000-8000-000000000000', '--clear'])
  t.same(await newEvents(db.sql, accountId, seen + 1), [], 'a refused command: none')
})
