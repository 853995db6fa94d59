// Rate alerts while Postgres is away (docs/events.md, Alerts): refusals counted meanwhile are kept
// in memory, not lost, and reported once Postgres answers again, in one event; a quota check that
// fails is asked again at the next check. Through a relay the test cuts, on the real Postgres.
import { tmpdir } from 'node:os'
import pino from 'pino'
import t from 'tap'
import { QuotaAlerts } from '../../src/alerts/quota-alerts.js'
import { RateAlerts } from '../../src/alerts/rate-alerts.js'
import { Limiter } from '../../src/limits/limiter.js'
import { openStore } from '../../src/store/db.js'
import { createParent } from '../helpers/gateway.js'
import { freshDatabase } from '../helpers/db.js'
import { postgresAddress, startRelay, viaPort } from './relay.js'

const log = pino({ level: 'silent' })
const db = await freshDatabase(t)
const relay = await startRelay(t, postgresAddress())
const store = await openStore({ databaseUrl: viaPort(db.url, relay.port), dataDir: tmpdir(), maxConnections: 2 })
t.teardown(async () => {
  await relay.restore()
  await store.close()
})
const rate = { requests: 1, perSeconds: 60 }

const events = async (accountId: string, type: string) =>
  db.sql<{ data: { object: { refused: number; used: number } } }[]>`
    select data from events where account_id = ${accountId} and type = ${type} order by seq`

t.test('refusals counted while Postgres is cut are reported once it is back, none twice', async (t) => {
  const parent = await createParent(db.sql)
  const alerts = new RateAlerts({ sql: store.sql, log, clock: Date.now, windowMs: 300_000 })
  for (let i = 0; i < 3; i++) alerts.refused(parent.id, 'account.rate', rate)
  await relay.cut()
  await alerts.flush()
  for (let i = 0; i < 2; i++) alerts.refused(parent.id, 'account.rate', rate)
  await alerts.flush()
  t.same(await events(parent.id, 'rate_limit.exceeded'), [], 'nothing written while Postgres is away')
  await relay.restore()
  await alerts.flush()
  const written = await events(parent.id, 'rate_limit.exceeded')
  t.same(
    written.map((e) => e.data.object.refused),
    [5],
    'one event with the 5 refusals: kept across the failures, added once',
  )
  await alerts.flush()
  t.equal((await events(parent.id, 'rate_limit.exceeded')).length, 1, 'and nothing more')
})

t.test('a due event that fails to be written is written at the next flush', async (t) => {
  const parent = await createParent(db.sql)
  let clock = Date.now()
  const alerts = new RateAlerts({ sql: store.sql, log, clock: () => clock, windowMs: 300_000 })
  alerts.refused(parent.id, 'account.rate', rate)
  await alerts.flush()
  alerts.refused(parent.id, 'account.rate', rate)
  await alerts.flush()
  clock += 300_000
  await relay.cut()
  await alerts.flush()
  await relay.restore()
  t.equal((await events(parent.id, 'rate_limit.exceeded')).length, 1, 'the second not written while away')
  await alerts.flush()
  t.same(
    (await events(parent.id, 'rate_limit.exceeded')).map((e) => e.data.object.refused),
    [1, 1],
    'written once Postgres is back',
  )
})

t.test('a quota check that fails is asked again at the next check', async (t) => {
  const parent = await createParent(db.sql)
  const month = new Date().toISOString().slice(0, 7)
  await db.sql`insert into usage_daily (tenant_id, day, status_class, requests, forwarded)
    values (${parent.id}, ${new Date().toISOString().slice(0, 10)}, 2, 10, 10)`
  await db.sql`insert into usage_period_units (tenant_id, period_start, meter, units, requests)
    values (${parent.id}, date_trunc('hour', now()), 'requests', 10, 10)`
  // An embedded limiter holding the account's quota of 10, its month's use read as 10.
  const limiter = new Limiter({ redis: null, keyPrefix: 'alerts-down', loadMonthUse: async () => 10, sweepEveryMs: 0 })
  t.teardown(() => limiter.close())
  await limiter.warm([
    { tenantId: parent.id, level: 'account', limits: { rate: null, monthlyQuota: { requests: 10 } } },
  ])
  t.same(
    limiter.quotaUses(),
    [
      {
        tenantId: parent.id,
        level: 'account',
        meter: 'requests',
        requests: 10,
        month,
        used: 10,
        alertThresholds: null,
      },
    ],
    'the limiter knows the quota is used up',
  )
  const quota = new QuotaAlerts({ sql: store.sql, log, limiter, thresholds: [80, 100] })
  await relay.cut()
  await quota.check()
  await relay.restore()
  t.same(await events(parent.id, 'usage.threshold_reached'), [], 'nothing while away')
  await quota.check()
  await quota.check()
  t.same(
    (await events(parent.id, 'usage.threshold_reached')).map((e) => e.data.object.used),
    [10, 10],
    '80 % and 100 %, once each, when Postgres is back',
  )
})
