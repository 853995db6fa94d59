// The request log's Postgres stopped under traffic (docs/operations.md, Request log): the log has
// a Postgres of its own (REQUEST_LOG_DATABASE_URL), which the test stops at once, as in a crash.
// Requests go on unaffected; the buffer stays within its bound and counts what it drops; when
// the server is back, the log resumes with the newest records the buffer kept.
import t from 'tap'
import { metricValue, startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { startPostgres } from '../helpers/own-postgres.js'
import { until } from '../helpers/poll.js'
import { startUpstream } from '../helpers/upstream.js'

const BUFFER = 40

t.test('the log stops with its Postgres; requests do not; the log resumes', async (t) => {
  const logPostgres = await startPostgres(t)
  const upstream = await startUpstream(t)
  const gw = await startGateway(t, {
    env: { REQUEST_LOG_DATABASE_URL: logPostgres.url },
    requestLog: { flushIntervalMs: 20, bufferRecords: BUFFER },
    gatewayConfig: { routes: [{ prefix: '/api', upstream: upstream.url }] },
  })
  const parent = await gw.createParent()
  const logged = async () =>
    (await gw.app.requestLogSql<{ path: string }[]>`select path from request_log order by seq`).map((r) => r.path)

  const before = await callAs(gw.url, parent.apiKey, { path: '/api/before', acting: 'self' })
  t.equal(before.status, 200)
  t.ok(await until(5_000, async () => (await logged()).includes('/api/before')), 'written to its own Postgres')
  const inMain = await gw.sql<{ name: string | null }[]>`select to_regclass('request_log')::text as name`
  t.equal(inMain[0]!.name, null, "nothing of it in the accounts' database")

  await logPostgres.stop()
  const statuses: number[] = []
  for (let i = 0; i < 100; i++)
    statuses.push((await callAs(gw.url, parent.apiKey, { path: `/api/during-${i}`, acting: 'self' })).status)
  t.same(new Set(statuses), new Set([200]), 'every request answered as usual while the log is down')
  t.ok(
    gw.app.requestLog!.buffer.size <= BUFFER,
    `the buffer stays within its bound (${gw.app.requestLog!.buffer.size})`,
  )
  t.ok(
    await until(5_000, async () => (await metricValue(gw.app, 'tgw_request_log_dropped_total')) >= 100 - BUFFER),
    'the records it could not keep are counted',
  )
  t.ok((await metricValue(gw.app, 'tgw_request_log_write_failures_total')) > 0, 'the failed writes are counted')

  await logPostgres.start()
  const after = await callAs(gw.url, parent.apiKey, { path: '/api/after', acting: 'self' })
  t.equal(after.status, 200)
  t.ok(await until(15_000, async () => (await logged()).includes('/api/after')), 'the log resumes')
  const paths = await logged()
  t.ok(paths.includes('/api/during-99'), 'the newest records of the outage were kept and written')
  t.notOk(paths.includes('/api/during-0'), 'the oldest were the ones dropped')
  t.equal(new Set(paths).size, paths.length, 'no record written twice')
})
