// Retention of events (docs/events.md, Retention): events past EVENTS_RETENTION_DAYS are deleted
// in batches, by a sweep each replica runs on a timer, and the others stay.
import postgres from 'postgres'
import t from 'tap'
import { EventRetention } from '../../src/events/retention.js'
import { startGateway } from '../helpers/gateway.js'
import { eventually } from '../helpers/poll.js'

const gw = await startGateway(t, {
  listen: false,
  env: { EVENTS_RETENTION_DAYS: '30' },
  eventRetention: { batchSize: 10 },
})
const parent = await gw.createParent()
const sql = gw.sql
const a = (
  await gw.call(parent.apiKey, { method: 'POST', url: '/v1/sub-accounts', acting: 'self', body: { name: 'a' } })
).json()

t.test('retention: events past EVENTS_RETENTION_DAYS go, in batches, the others stay', async (t) => {
  const keep = await sql`select count(*)::int as n from events`
  // 25 events of 31 to 60 days ago, and one of 29 days ago.
  await sql`
    insert into events (id, account_id, type, actor, target, data, created_at)
    select 'evt_OLD' || lpad(i::text, 23, '0'), ${parent.id}, 'sub_account.updated',
           '{"type":"operator","key_id":null}', jsonb_build_object('type', 'sub_account', 'id', ${a.id}::text),
           '{"object":{},"previous":{}}', now() - (30 + i) * interval '1 day'
    from generate_series(1, 25) as i`
  await sql`
    insert into events (id, account_id, type, actor, target, data, created_at)
    values ('evt_RECENT', ${parent.id}, 'sub_account.updated', '{"type":"operator","key_id":null}',
            ${sql.json({ type: 'sub_account', id: a.id })}, '{"object":{},"previous":{}}', now() - interval '29 days')`
  // Each delete statement counted: the sweep must take them 10 at a time.
  await sql.unsafe(`
    create table delete_statements (n int);
    create function count_delete() returns trigger language plpgsql as $$
      begin insert into delete_statements values (1); return null; end $$;
    create trigger count_deletes after delete on events for each statement execute function count_delete();`)
  const deleted = await gw.app.eventRetention.sweep()
  t.equal(deleted, 25)
  const [left] = await sql`select count(*)::int as n from events`
  t.equal(left!.n, keep[0]!.n + 1, 'the recent one and the real ones stay')
  const [statements] = await sql`select count(*)::int as n from delete_statements`
  t.equal(statements!.n, 3, '10 + 10 + 5')
  t.equal(await gw.app.eventRetention.sweep(), 0, 'nothing more')
})

t.test('retention runs on its own, and stops with the app', async (t) => {
  const own = await startGateway(t, {
    listen: false,
    database: gw.database,
    eventRetention: { firstSweepAfterMs: 0, intervalMs: 50 },
  })
  await sql`
    insert into events (id, account_id, type, actor, target, data, created_at)
    values ('evt_ANCIENT', ${parent.id}, 'sub_account.updated', '{"type":"operator","key_id":null}',
            ${sql.json({ type: 'sub_account', id: a.id })}, '{"object":{},"previous":{}}', now() - interval '91 days')`
  const gone = await eventually(
    10_000,
    async () => (await sql`select 1 from events where id = 'evt_ANCIENT'`).length === 0,
  )
  t.not(gone, null, 'deleted by the timer (default 90 days)')
  await own.close()
  t.pass('closed with its timer')
})

t.test('a sweep that fails is logged, and the next one tries again', async (t) => {
  // Nothing listens on port 1: every statement fails at once.
  const nowhere = postgres('postgres://postgres@127.0.0.1:1/none', { max: 1, connect_timeout: 1, onnotice: () => {} })
  t.teardown(() => nowhere.end({ timeout: 0 }))
  const warnings: string[] = []
  const log = { warn: (_: unknown, message: string) => warnings.push(message), info: () => {} }
  const retention = new EventRetention({
    sql: nowhere,
    retentionDays: 1,
    firstSweepAfterMs: 0,
    intervalMs: 20,
    log: log as never,
  })
  retention.start()
  t.not(await eventually(10_000, async () => warnings.length >= 2), null, 'two failed sweeps, each logged')
  await retention.stop()
  t.match(warnings[0], /deleting expired events failed/)
})
