// The usage export's push through a backlog longer than one round sends (50 batches of 100): the
// next round goes at once rather than after the push's interval, so that a month of closed periods
// reaches the receiver in minutes (bench/README.md, usage export). Real Postgres, a real receiver.
import t from 'tap'
import pino from 'pino'
import { UsageExporter } from '../../src/usage/exporter.js'
import { freshDatabase } from '../helpers/db.js'
import { until } from '../helpers/poll.js'
import { startReceiver } from '../helpers/webhook-receiver.js'

const HOUR = 3_600_000
const SECRET = `whsec_${Buffer.alloc(32, 5).toString('base64')}`
const db = await freshDatabase(t)
const sql = db.sql
const receiver = await startReceiver(t, '/usage')
receiver.secret(SECRET)
let events = 0
receiver.answer((delivery, response) => {
  events += (JSON.parse(delivery.body) as unknown[]).length
  response.writeHead(200).end('ok')
})

// One parent with 5,100 sub-accounts, each with units in one closed period: 51 batches.
const [parent] = await sql<{ id: string }[]>`insert into tenants (name) values ('P') returning id`
await sql`
  insert into tenants (name, parent_id) select 's' || i, ${parent!.id} from generate_series(1, 5100) as i`
await sql`
  insert into usage_period_units (tenant_id, period_start, meter, units, requests)
  select id, '2026-11-01T00:00:00Z', 'requests', 1, 1 from tenants where parent_id = ${parent!.id}`
await sql`update usage_close set closed_until = '2026-11-01T01:00:00Z', period_seconds = 3600`

const exporter = new UsageExporter({
  sql,
  log: pino({ level: 'silent' }),
  url: receiver.url,
  secret: SECRET,
  source: 'https://gateway.example',
  periodSeconds: 3600,
  retrySchedule: [100],
  intervalMs: HOUR,
})
t.teardown(() => exporter.stop())

t.test('a round sends 50 batches; the rest follows at once, not after the interval', async (t) => {
  await exporter.tick()
  t.equal(events, 5_000, 'one round: 50 batches of 100')
  exporter.start()
  t.ok(await until(30_000, async () => events === 5_100), `the rest at once (the interval is an hour): ${events}`)
})
