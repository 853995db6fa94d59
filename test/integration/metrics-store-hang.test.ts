// GET /metrics answers while Postgres does not (docs/operations.md, Metrics): the gauges read
// from Postgres at scrape time wait a bounded time, so that a scrape never outlasts Prometheus's
// scrape timeout and every other metric (the alerting ones among them) still arrives. Here the
// oldest due webhook delivery's query waits on a lock held on webhook_deliveries, in this file's
// own database.
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { serveMetrics } from '../../src/ops/metrics-server.js'
import { freshDatabase } from '../helpers/db.js'
import { startGateway } from '../helpers/gateway.js'
import { holding } from '../helpers/held-transaction.js'
import { orTimeout, until } from '../helpers/poll.js'

const database = await freshDatabase(t)
/** How long a gauge read from Postgres may hold a scrape (src/ops/webhook-metrics.ts, store/activity.ts). */
const SCRAPE_BOUND_MS = 1_000
/** What a loaded machine may add to the bound before the test calls it broken. */
const SLACK_MS = 2_500
/** Past this, the scrape is taken to hang (the defect): the test fails instead of waiting on. */
const HUNG_MS = 10_000

/** Whether a query of this database on webhook_deliveries waits on a lock. */
async function deliveriesQueryWaits(): Promise<boolean> {
  const rows = await database.sql`
    select 1 from pg_stat_activity
    where datname = current_database() and wait_event_type = 'Lock' and query like '%min(next_attempt_at)%'`
  return rows.length > 0
}

t.test('/metrics answers within its bound while the webhook gauge cannot read Postgres', async (t) => {
  const { app } = await startGateway(t, {
    listen: false,
    database,
    pool: { maxConnections: 4 },
    redis: false,
  })
  await app.ready()
  const server = await serveMetrics(app.metrics.registry, 0, '127.0.0.1')
  t.teardown(() => new Promise((resolve) => server.close(resolve)))
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`
  const before = await (await fetch(url)).text()
  t.match(before, /^tgw_webhook_oldest_due_seconds 0$/m, 'read while Postgres answers')

  const release = await holding(database.url, 'lock table webhook_deliveries in access exclusive mode')
  let released = false
  t.teardown(() => (released ? undefined : release()))
  const started = performance.now()
  const scrape = fetch(url).then(async (response) => ({ status: response.status, text: await response.text() }))
  t.ok(await until(HUNG_MS, deliveriesQueryWaits), "the gauge's query waits on the lock")
  const answer = await orTimeout(scrape, HUNG_MS, 'hung' as const)
  const took = performance.now() - started
  t.not(answer, 'hung', 'the scrape did not wait for the lock')
  t.ok(took < SCRAPE_BOUND_MS + SLACK_MS, `answered within the bound (${Math.round(took)} ms)`)
  if (answer !== 'hung') {
    t.equal(answer.status, 200)
    t.match(answer.text, /^tgw_usage_flush_lag_seconds \d/m, 'with the other metrics')
    t.match(answer.text, /^tgw_http_requests_total|^# TYPE tgw_http_requests_total/m)
    t.match(answer.text, /^tgw_webhook_oldest_due_seconds 0$/m, 'the gauge keeps the last value it read')
  }
  await release()
  released = true
})
