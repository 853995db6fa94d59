// The usage export's push through faults (docs/billing.md, Pushing the export): Postgres cut off
// for 10 s (through a TCP relay the test owns) while a batch is at the receiver, so its
// acknowledgement cannot be written; then the receiver down for a minute. The receiver, which dedupes by event id,
// ends with exactly the closed periods' units Postgres holds, the batch cut off is sent again under
// the same webhook-id, and nothing crashes; reconciliation then finds the export whole and the
// limiter in step with the meter. The usage clock is the test's (so the request log, which keeps
// real times, is off).
import type { ServerResponse } from 'node:http'
import { HTTP } from 'cloudevents'
import t from 'tap'
import { mintKey } from '../../src/auth/mint.js'
import { createSubAccount } from '../../src/store/tenants.js'
import { freshDatabase } from '../helpers/db.js'
import { metricValue, startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { until } from '../helpers/poll.js'
import { startUpstream } from '../helpers/upstream.js'
import { type Delivery, startReceiver } from '../helpers/webhook-receiver.js'
import { watchCrashes } from './crashes.js'
import { postgresAddress, startRelay, viaPort } from './relay.js'

const HOUR = 3_600_000
/** How long each is away: Postgres 10 s, the receiver a minute. */
const OUTAGE_MS = { postgres: 10_000, receiver: 60_000 }
const MINUTE = 60_000
const SECRET = `whsec_${Buffer.alloc(32, 9).toString('base64')}`

const crashes = watchCrashes(t)
const db = await freshDatabase(t)
const relay = await startRelay(t, postgresAddress())
const upstream = await startUpstream(t, (request, response: ServerResponse) => {
  const tokens = new URLSearchParams(request.url!.split('?')[1] ?? '').get('tokens') ?? '0'
  response.writeHead(200, { 'x-tokens-used': tokens }).end('done')
})
const receiver = await startReceiver(t, '/usage')
receiver.secret(SECRET)
const received = new Map<string, { key: string; units: number }>()
const keep = (delivery: Delivery) => {
  const events = HTTP.toEvent({
    headers: { 'content-type': String(delivery.headers['content-type']) },
    body: delivery.body,
  })
  for (const event of [events].flat()) {
    const data = event.data as { meter: string; units: number; period_start: string }
    received.set(event.id, { key: `${event.subject} ${data.meter} ${data.period_start}`, units: data.units })
  }
}

const T0 = Math.floor(Date.now() / MINUTE) * MINUTE - 30 * MINUTE
let clock = T0 + 1_000
const gw = await startGateway(t, {
  database: db,
  pool: { url: viaPort(db.url, relay.port) },
  relays: [relay],
  redis: false,
  usageFlushIntervalMs: HOUR,
  usagePeriods: { clock: () => clock, closeIntervalMs: HOUR, exportIntervalMs: 50 },
  env: {
    USAGE_PERIOD_SECONDS: '60',
    USAGE_CLOSE_GRACE_SECONDS: '1',
    USAGE_EXPORT_URL: receiver.url,
    USAGE_EXPORT_SECRET: SECRET,
    WEBHOOKS_RETRY_SCHEDULE: '100ms,300ms',
    REQUEST_LOG_RETENTION_DAYS: '0',
  },
  gatewayConfig: {
    routes: [
      { prefix: '/llm', upstream: upstream.url, cost: 3, meters: [{ name: 'tokens', header: 'X-Tokens-Used' }] },
    ],
  },
})
const sql = db.sql
const P = await gw.createParent({ name: 'P' })
const subs = await Promise.all(
  ['a', 'b', 'c'].map((name) => createSubAccount(sql, P.id, { name, externalId: name, metadata: {} })),
)
const keys = await Promise.all(
  subs.map((sub) => mintKey(sql, { tenantId: sub.id, name: 'k', scopes: [], withClientSecret: false })),
)
// a under a rate it never reaches: its limiter counts beside the meter through the faults.
const limited = await callAs(gw.url, P.apiKey, {
  method: 'PATCH',
  path: `/v1/sub-accounts/${subs[0]!.id}`,
  acting: 'self',
  json: { limits: { rate: { requests: 100_000, per_seconds: 60 } } },
})
if (limited.status !== 200) throw new Error(`${limited.status} ${limited.body}`)

const traffic = async (n: number) => {
  for (let i = 0; i < n; i++) {
    const res = await callAs(gw.url, keys[i % keys.length]!.apiKey, { path: `/llm/x?tokens=${i}` })
    if (res.status !== 200) throw new Error(`${res.status} ${res.body}`)
  }
}
const closeAt = async (at: number) => {
  clock = at
  await gw.app.usageMeter.flush()
  return gw.app.usagePeriods.close()
}
const caughtUp = async () => {
  const rows = await sql<{ key: string; units: string }[]>`
    select u.tenant_id || ' ' || u.meter || ' ' || to_char(u.period_start at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') as key,
           u.units::text as units
    from usage_period_units u where u.period_start < (select closed_until from usage_close)`
  const want = new Map(rows.map((r) => [r.key, Number(r.units)]))
  const totals = () => {
    const got = new Map<string, number>()
    for (const { key, units } of received.values()) got.set(key, (got.get(key) ?? 0) + units)
    return got
  }
  // The gateway writes the receiver's acknowledgement after its answer: reconciliation reads that.
  const unacknowledged = async () => {
    const [row] = await sql<{ n: number }[]>`
      select count(*)::int as n from usage_period_units u
      where u.period_start < (select closed_until from usage_close)
        and not exists (select 1 from usage_export_cursors c
                        where (u.period_start, u.tenant_id, u.meter) <= (c.period_start, c.tenant_id, c.meter))`
    return row!.n
  }
  const ok = await until(90_000, async () => {
    const got = totals()
    return got.size === want.size && [...want].every(([k, v]) => got.get(k) === v) && (await unacknowledged()) === 0
  })
  return { ok, detail: JSON.stringify({ want: Object.fromEntries(want), got: Object.fromEntries(totals()) }) }
}

t.test('Postgres cut off while a batch is at the receiver: the batch goes again, counted once', async (t) => {
  let cutDone: Promise<void> | null = null
  receiver.answer((delivery, response) => {
    if (delivery.verified !== null) keep(delivery)
    if (cutDone === null) {
      // The first batch is taken; Postgres goes before the gateway can write that it was.
      cutDone = relay.cut('rst').then(() => void response.writeHead(200).end('ok'))
      return
    }
    response.writeHead(200).end('ok')
  })
  await traffic(30)
  await closeAt(T0 + MINUTE + 1_000)
  t.ok(await until(30_000, async () => cutDone !== null), 'a batch reached the receiver')
  await cutDone
  const cutAt = Date.now()
  const failures = await metricValue(gw.app, 'tgw_usage_flush_failures_total')
  await traffic(9) // counted in memory while Postgres is away
  clock = T0 + 90_000
  await gw.app.usageMeter.flush()
  t.ok(
    await until(30_000, async () => (await metricValue(gw.app, 'tgw_usage_flush_failures_total')) > failures),
    'the flush failed while Postgres was cut off',
  )
  // Postgres stays away for 10 s in all, as an outage of a real database would.
  await until(20_000, async () => Date.now() - cutAt >= OUTAGE_MS.postgres, 250)
  await relay.restore()
  await closeAt(T0 + 2 * MINUTE + 1_000)
  const { ok, detail } = await caughtUp()
  t.ok(ok, `the receiver has exactly what Postgres counted: ${detail}`)
  const firstId = receiver.deliveries[0]!.id
  t.ok(
    receiver.deliveries.filter((d) => d.id === firstId).length >= 2,
    'the batch whose acknowledgement was lost came again, under its id',
  )
})

t.test('the receiver down for a minute: retried until it answers, nothing lost', async (t) => {
  let down = true
  let refused = 0
  receiver.answer((delivery, response) => {
    if (down) {
      refused++
      return void response.writeHead(503).end('down')
    }
    if (delivery.verified !== null) keep(delivery)
    response.writeHead(200).end('ok')
  })
  await traffic(12)
  await closeAt(T0 + 3 * MINUTE + 1_000)
  const downAt = Date.now()
  t.ok(await until(30_000, async () => refused >= 3), 'attempts went on while it was down')
  // Down for a minute in all: the push keeps at it, and loses nothing.
  await until(90_000, async () => Date.now() - downAt >= OUTAGE_MS.receiver, 500)
  t.ok((await metricValue(gw.app, 'tgw_usage_export_lag_seconds')) > 0, 'the lag shows it')
  down = false
  const { ok, detail } = await caughtUp()
  t.ok(ok, `all there once it is back: ${detail}`)
  t.same(crashes, [], 'nothing crashed')
})

t.test('reconciliation after the faults: exported whole, the limiter in step, nothing unexplained', async (t) => {
  const iso = (ms: number) => `${new Date(ms).toISOString().slice(0, 19)}Z`
  const res = await callAs(gw.url, P.apiKey, {
    path: `/v1/sub-accounts/usage/reconciliation?from=${iso(T0)}&to=${iso(T0 + 3 * MINUTE)}`,
  })
  t.equal(res.status, 200)
  const { data } = JSON.parse(res.body) as {
    data: {
      sub_account_id: string
      meter: string
      meter_units: number
      limiter_units: number | null
      exported_units: number
      differences: { against: string; kind: string }[]
    }[]
  }
  t.equal(data.length, 6, 'three sub-accounts, two meters')
  for (const entry of data) {
    t.equal(entry.exported_units, entry.meter_units, `${entry.sub_account_id} ${entry.meter}: exported whole`)
    t.same(
      entry.differences.map((d) => `${d.against} ${d.kind}`),
      ['log log_expired'],
      'only the log, which is off, differs',
    )
  }
  const a = data.find((entry) => entry.sub_account_id === subs[0]!.id && entry.meter === 'requests')
  t.ok(
    a !== undefined && a.limiter_units === a.meter_units,
    `a's limiter charged what the meter counted: ${JSON.stringify(a)}`,
  )
})
