// The request log's retention (docs/operations.md, Request log): whole days are dropped, as
// partitions, once past REQUEST_LOG_RETENTION_DAYS; the days within it are kept whole. And with
// REQUEST_LOG_RETENTION_DAYS=0 nothing is recorded at all.
import t from 'tap'
import { DAY_MS, dayOf, partitionDays } from '../../src/request-log/partitions.js'
import { freshDatabase } from '../helpers/db.js'
import { startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { sleep, until } from '../helpers/poll.js'
import { logRecord } from '../helpers/request-records.js'

/** A record of `accountId` at `timeMs`. */
const record = (timeMs: number, accountId: string) =>
  logRecord({
    id: `r-${timeMs}`,
    idGiven: true,
    timeMs,
    accountId,
    tenantId: accountId,
    keyId: accountId,
    path: '/api/x',
  })

t.test('days past the retention are dropped as whole partitions, at start and hourly', async (t) => {
  const database = await freshDatabase(t)
  const now = Date.now()
  const today = dayOf(now)
  const first = await startGateway(t, { database, requestLog: { flushIntervalMs: 20 } })
  const parent = await first.createParent()
  // Ten days of records, today's included: each day gets its partition as it is written.
  for (let back = 0; back < 10; back++) first.app.requestLog!.add(record(now - back * DAY_MS, parent.id))
  t.ok(await until(5_000, async () => (await partitionDays(database.sql)).length === 10), 'a partition a day')
  await first.close()

  // A replica whose clock says two days later, keeping 7 days, sweeps at start: the days before
  // (today + 2) - 7 go, whole.
  let clock = now + 2 * DAY_MS
  const second = await startGateway(t, {
    database,
    env: { REQUEST_LOG_RETENTION_DAYS: '7' },
    requestLog: { clock: () => clock, sweepIntervalMs: 50 },
  })
  const kept = Array.from({ length: 6 }, (_, i) => today - 5 + i)
  t.ok(await until(5_000, async () => (await partitionDays(database.sql)).length === 6), 'the expired days dropped')
  t.same(await partitionDays(database.sql), kept, 'the last six days of records are kept')
  const rows = await database.sql<{ n: string }[]>`select count(*)::text as n from request_log`
  t.equal(rows[0]!.n, '6', 'and every record of them')

  // Three days more: the next sweep drops three more days, and the API lists what is left.
  clock += 3 * DAY_MS
  t.ok(await until(5_000, async () => (await partitionDays(database.sql)).length === 3), 'the hourly sweep')
  const listed = await callAs(second.url, parent.apiKey, {
    path: '/v1/sub-accounts/requests?route=/api',
    acting: 'self',
  })
  t.equal(listed.json().data.length, 3)
})

t.test('REQUEST_LOG_RETENTION_DAYS=0: nothing recorded, no table, every list empty', async (t) => {
  const gw = await startGateway(t, { env: { REQUEST_LOG_RETENTION_DAYS: '0' } })
  t.equal(gw.app.requestLog, null)
  const parent = await gw.createParent()
  const first = await callAs(gw.url, parent.apiKey, { path: '/v1/sub-accounts', acting: 'self' })
  t.equal(first.status, 200)
  await sleep(300)
  const table = await gw.sql<{ name: string | null }[]>`select to_regclass('request_log')::text as name`
  t.equal(table[0]!.name, null, 'the table is not even made')
  const listed = await callAs(gw.url, parent.apiKey, { path: '/v1/sub-accounts/requests', acting: 'self' })
  t.same([listed.status, listed.json()], [200, { data: [], next_cursor: null }])
  const one = await callAs(gw.url, parent.apiKey, {
    path: `/v1/sub-accounts/requests/${first.headers['x-request-id']}`,
    acting: 'self',
  })
  t.equal(one.status, 404)
  const bad = await callAs(gw.url, parent.apiKey, { path: '/v1/sub-accounts/requests?status=9xx', acting: 'self' })
  t.equal(bad.status, 400, 'a bad filter is still a 400')
})
