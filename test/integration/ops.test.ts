// Health, readiness and metrics (docs/operations.md), against the real Postgres and Redis, and
// against ones that do not answer (a port nothing listens on).
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { serveMetrics } from '../../src/ops/metrics-server.js'
import { operatorOrigin } from '../../src/events/record.js'
import { createSubAccountWithEvent } from '../../src/management/sub-account-changes.js'
import { openStore } from '../../src/store/db.js'
import { type EventFilter, listEvents } from '../../src/store/events.js'
import { monthUse } from '../../src/limits/store.js'
import { createParentAccount } from '../../src/store/tenants.js'
import { usageRows } from '../../src/store/usage-reads.js'
import { UsageMeter } from '../../src/usage/meter.js'
import { freshDatabase } from '../helpers/db.js'
import { createParent, metricValue as metric, startGateway } from '../helpers/gateway.js'
import { eventually } from '../helpers/poll.js'
import { problemOf } from '../helpers/problems.js'
import { redisPrefix } from '../helpers/redis.js'
import { REFUSED_PORT, startUpstream } from '../helpers/upstream.js'

const database = await freshDatabase(t)
const prefix = redisPrefix(t)
const DEAD_POSTGRES = `postgres://postgres@127.0.0.1:${REFUSED_PORT}/nothing`
const DEAD_REDIS = `redis://127.0.0.1:${REFUSED_PORT}`

/**
 * A gateway on the test database (or where `databaseUrl` points), with a pool of its own as
 * main.ts opens it (so the pool metrics have something to report), made ready but not listening.
 */
async function gateway(
  t: Test,
  options: { databaseUrl?: string; redis?: string | false; upstreamUrl?: string } = {},
): Promise<FastifyInstance> {
  const { app } = await startGateway(t, {
    listen: false,
    database,
    pool: { url: options.databaseUrl, maxConnections: 3 },
    redis: options.redis,
    redisKeyPrefix: prefix,
    upstreamUrl: options.upstreamUrl,
  })
  await app.ready()
  return app
}

/** Redis connects in the background: waits (up to 5 s) until `check` holds. */
const soon = async (check: () => Promise<boolean>): Promise<boolean> => (await eventually(5_000, check, 50)) !== null

t.test('/healthz answers without a key and without asking any store', async (t) => {
  // Neither store answers: liveness must not depend on them, or an outage restarts every pod.
  const app = await gateway(t, { databaseUrl: DEAD_POSTGRES, redis: DEAD_REDIS })
  const response = await app.inject({ method: 'GET', url: '/healthz' })
  t.equal(response.statusCode, 200)
  t.same(response.json(), { status: 'ok' })
  t.ok(response.headers['x-request-id'], 'it carries a request id like every response')
  const head = await app.inject({ method: 'HEAD', url: '/healthz' })
  t.equal(head.statusCode, 200, 'HEAD works too')
})

t.test('/readyz: 200 when Postgres and Redis answer, "off" without Redis', async (t) => {
  const app = await gateway(t)
  // Ready as soon as Postgres answers (docs/operations.md); Redis connects in the background.
  t.ok(
    await soon(async () => (await app.inject({ method: 'GET', url: '/readyz' })).json().checks?.redis === 'ok'),
    'Redis reported ok once connected',
  )
  const ready = await app.inject({ method: 'GET', url: '/readyz' })
  const { redis: masters, ...body } = ready.json()
  t.same(body, { status: 'ready', checks: { postgres: 'ok', redis: 'ok' } })
  t.match(
    masters,
    { topology: 'server', masters: [/^127\.0\.0\.1:\d+$/], master_changes: 0, last_master_change: null },
    'the master the gateway uses, and no change of master yet',
  )

  const alone = await gateway(t, { redis: false })
  const response = await alone.inject({ method: 'GET', url: '/readyz' })
  t.equal(response.statusCode, 200)
  t.same(
    response.json(),
    { status: 'ready', checks: { postgres: 'ok', redis: 'off' } },
    'no REDIS_URL: in-process cache only, still ready',
  )
})

t.test('/readyz: 503 problem+json while Postgres has never been reached', async (t) => {
  const noPostgres = await gateway(t, { databaseUrl: DEAD_POSTGRES, redis: false })
  const first = await noPostgres.inject({ method: 'GET', url: '/readyz' })
  t.equal(first.statusCode, 503)
  const body = problemOf(first)
  t.equal(body.code, 'not_ready')
  t.match(body.detail, /^postgres cannot be reached/)
  t.same(body.checks, { postgres: 'down', redis: 'off' })
})

t.test('/readyz: 200 without Redis once Postgres answered, the body naming Redis', async (t) => {
  const noRedis = await gateway(t, { redis: DEAD_REDIS })
  const second = await noRedis.inject({ method: 'GET', url: '/readyz' })
  t.equal(second.statusCode, 200, 'a Redis outage does not take the replica out (docs/operations.md)')
  const { redis: masters, ...secondBody } = second.json()
  t.same(secondBody, { status: 'ready', checks: { postgres: 'ok', redis: 'down' } })
  t.same(masters.masters, [], 'no master while Redis is down')
  t.equal(await metric(noRedis, 'tgw_redis_up', { connection: 'commands' }), 0, 'tgw_redis_up says so')
})

t.test('/readyz: 503 once shutdown began, while the stores are fine', async (t) => {
  const app = await gateway(t, { redis: false })
  t.equal((await app.inject({ method: 'GET', url: '/readyz' })).statusCode, 200)
  app.readiness.draining = true
  const response = await app.inject({ method: 'GET', url: '/readyz' })
  t.equal(response.statusCode, 503)
  const body = problemOf(response)
  t.equal(body.draining, true)
  t.match(body.detail, /shutting down/)
  t.equal((await app.inject({ method: 'GET', url: '/healthz' })).statusCode, 200, 'but it is alive')
})

t.test('the ops paths are served by the gateway, never proxied, even with a catch-all upstream', async (t) => {
  const upstream = await startUpstream(t)
  const app = await gateway(t, { upstreamUrl: upstream.url, redis: false })
  for (const url of ['/healthz', '/readyz', '/healthz?x=1']) {
    const response = await app.inject({ method: 'GET', url })
    t.equal(response.statusCode, 200, `${url} answered by the gateway`)
  }
  // Other methods and depths under the reserved prefixes are not the catch-all's either, even
  // with a valid key (docs/operations.md: never proxied).
  const key = await createParent(database.sql, { name: 'reserved' })
  const auth = { authorization: `Bearer ${key.apiKey}` }
  for (const [method, url] of [
    ['POST', '/healthz'],
    ['DELETE', '/readyz'],
    ['GET', '/healthz/x'],
    ['POST', '/openapi.json'],
    ['GET', '/openapi.json/x'],
    ['POST', '/docs'],
    ['GET', '/DOCS/x'],
    ['GET', '/%68ealthz/x'],
  ] as const) {
    const response = await app.inject({ method, url, headers: auth })
    t.equal(response.statusCode, 404, `${method} ${url} is 404`)
    t.equal(problemOf(response).code, 'route_not_found')
  }
  t.equal(upstream.received.length, 0, 'the upstream saw none of them')
  // Metrics live on METRICS_PORT only: on the public port /metrics is an ordinary (proxied) path.
  const noUpstream = await gateway(t, { redis: false })
  const metrics = await noUpstream.inject({ method: 'GET', url: '/metrics' })
  t.equal(metrics.statusCode, 404)
  t.equal(problemOf(metrics).code, 'route_not_found', 'no /metrics on the public port')
})

t.test('metrics: requests by route kind and status class, upstream latency, cache tiers', async (t) => {
  const upstream = await startUpstream(t)
  const app = await gateway(t, { upstreamUrl: upstream.url })
  await soon(
    async () =>
      (await metric(app, 'tgw_redis_up', { connection: 'commands' })) === 1 &&
      (await metric(app, 'tgw_redis_up', { connection: 'subscriber' })) === 1,
  )
  t.equal(await metric(app, 'tgw_redis_up', { connection: 'commands' }), 1, 'redis up')
  t.equal(await metric(app, 'tgw_redis_up', { connection: 'subscriber' }), 1, 'subscriber up')

  const key = await createParent(database.sql, { name: 'metrics' })
  const auth = { authorization: `Bearer ${key.apiKey}` }
  t.equal((await app.inject({ method: 'GET', url: '/v1/sub-accounts', headers: auth })).statusCode, 200)
  t.equal((await app.inject({ method: 'GET', url: '/v1/things', headers: auth })).statusCode, 200)
  t.equal((await app.inject({ method: 'GET', url: '/v1/things', headers: auth })).statusCode, 200)
  // Both matched the catch-all route, so they count as proxy requests, answered by the gateway.
  t.equal((await app.inject({ method: 'GET', url: '/v1/sub-accounts/nope/x/y' })).statusCode, 404)
  t.equal((await app.inject({ method: 'GET', url: '/a//b' })).statusCode, 400)
  t.equal((await app.inject({ method: 'GET', url: '/healthz' })).statusCode, 200)
  // No route at all: kind "none".
  const noRoutes = await gateway(t, { redis: false })
  t.equal((await noRoutes.inject({ method: 'GET', url: '/nowhere' })).statusCode, 404)
  t.equal(
    await metric(noRoutes, 'tgw_http_requests_total', { kind: 'none', status_class: '4xx' }),
    1,
    'an unmatched path is kind none',
  )

  t.equal(
    await metric(app, 'tgw_http_requests_total', { kind: 'management', status_class: '2xx' }),
    1,
    'one management 2xx',
  )
  t.equal(await metric(app, 'tgw_http_requests_total', { kind: 'proxy', status_class: '2xx' }), 2, 'two proxied 2xx')
  t.equal(await metric(app, 'tgw_http_requests_total', { kind: 'ops', status_class: '2xx' }), 1, 'one ops 2xx')
  t.equal(
    await metric(app, 'tgw_http_requests_total', { kind: 'proxy', status_class: '4xx' }),
    2,
    'the 404 and the bad path',
  )
  t.equal(await metric(app, 'tgw_http_requests_total', { kind: 'none', status_class: '4xx' }), 0)
  const durations = (await app.metrics.registry.getSingleMetric('tgw_http_request_duration_seconds')!.get()).values
  const proxyCount = durations.find(
    (v) =>
      (v as { metricName?: string }).metricName === 'tgw_http_request_duration_seconds_count' &&
      v.labels.kind === 'proxy',
  )
  t.equal(proxyCount?.value, 4, 'the latency histogram saw the four requests on the proxy route')
  const upstreamCount = (
    await app.metrics.registry.getSingleMetric('tgw_upstream_duration_seconds')!.get()
  ).values.find((v) => (v as { metricName?: string }).metricName === 'tgw_upstream_duration_seconds_count')
  t.equal(upstreamCount?.value, 2, 'upstream latency: one observation per request that reached the upstream')

  // The key and its tenant: missed locally and in Redis on the first request, then local hits.
  t.ok((await metric(app, 'tgw_cache_misses_total', { tier: 'local' })) >= 2, 'local misses for the first lookups')
  t.ok((await metric(app, 'tgw_cache_misses_total', { tier: 'redis' })) >= 2, 'Redis misses for the first lookups')
  t.ok((await metric(app, 'tgw_cache_hits_total', { tier: 'local' })) >= 2, 'local hits afterwards')
  t.equal(await metric(app, 'tgw_proxied_requests_total'), 4)
})

t.test('metrics: invalidations received from another replica', async (t) => {
  const a = await gateway(t)
  const b = await gateway(t)
  await soon(async () => (await metric(b, 'tgw_redis_up', { connection: 'subscriber' })) === 1)
  const key = await createParent(database.sql, { name: 'bus' })
  const before = await metric(b, 'tgw_cache_invalidations_received_total')
  const created = await a.inject({
    method: 'POST',
    url: '/v1/sub-accounts',
    headers: { authorization: `Bearer ${key.apiKey}`, 'content-type': 'application/json' },
    payload: JSON.stringify({ name: 'sub' }),
  })
  t.equal(created.statusCode, 201)
  t.ok(
    await soon(async () => (await metric(b, 'tgw_cache_invalidations_received_total')) > before),
    'B counted the message A published',
  )
})

t.test('metrics: Postgres pool use, as pg_stat_activity reports this process', async (t) => {
  const app = await gateway(t, { redis: false })
  t.equal((await app.inject({ method: 'GET', url: '/readyz' })).statusCode, 200)
  const text = await app.metrics.registry.metrics()
  t.match(text, /^tgw_postgres_pool_max 3$/m, 'the pool size')
  // The scrape's own query is one active connection of this process.
  const active = /^tgw_postgres_connections\{state="active"\} (\d+)$/m.exec(text)
  t.ok(active !== null && Number(active[1]) >= 1, `an active connection is reported (${active?.[0]})`)
})

t.test('usage flush failures and lag', async (t) => {
  const dead = await openStore({ databaseUrl: DEAD_POSTGRES, dataDir: '.' })
  t.teardown(() => dead.close())
  let failures = 0
  let now = 1_000_000
  const silent = {
    warn() {},
    info() {},
    error() {},
    debug() {},
    trace() {},
    fatal() {},
    child: () => silent,
    level: 'silent',
    silent() {},
  }
  const meter = new UsageMeter({ sql: dead.sql, log: silent as never, now: () => now, onFlushFailed: () => failures++ })
  t.equal(meter.lagMs(), 0, 'nothing pending, no lag')
  meter.record('00000000-0000-4000-8000-000000000001', 200)
  now += 1500
  t.equal(meter.lagMs(), 1500, 'the oldest pending count has waited 1.5 s')
  await meter.flush()
  t.equal(failures, 1, 'the failed flush is reported')
  t.equal(meter.lagMs(), 1500, 'the counts are kept, and so is their age')

  // On the real database the flush works and leaves no lag.
  const account = await createParent(database.sql, { name: 'meter' })
  const good = new UsageMeter({
    sql: database.sql,
    log: silent as never,
    now: () => now,
    onFlushFailed: () => failures++,
  })
  good.record(account.id, 200)
  t.equal(good.lagMs(), 0, 'a count recorded now has no lag yet')
  await good.flush()
  t.equal(good.lagMs(), 0)
  t.equal(failures, 1, 'no failure on a database that answers')
})

t.test('serveMetrics: /metrics on its own port, nothing else', async (t) => {
  const app = await gateway(t, { redis: false })
  await app.inject({ method: 'GET', url: '/healthz' })
  const server = await serveMetrics(app.metrics.registry, 0, '127.0.0.1')
  t.teardown(() => new Promise((resolve) => server.close(resolve)))
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const response = await fetch(`${base}/metrics`)
  t.equal(response.status, 200)
  t.match(response.headers.get('content-type'), /^text\/plain/)
  const text = await response.text()
  for (const name of [
    'tgw_http_requests_total',
    'tgw_http_request_duration_seconds',
    'tgw_upstream_duration_seconds',
    'tgw_cache_hits_total',
    'tgw_cache_misses_total',
    'tgw_cache_invalidations_received_total',
    'tgw_usage_flush_lag_seconds',
    'tgw_usage_flush_failures_total',
    'tgw_postgres_connections',
    'tgw_redis_up',
  ]) {
    t.match(text, new RegExp(`^# TYPE ${name} `, 'm'), `${name} is exported`)
  }
  t.equal((await fetch(`${base}/other`)).status, 404, 'any other path is 404')
})

t.test("the gateway's connections: no parallel query; writes keep their plans, usage reads do not", async (t) => {
  const store = await openStore({ databaseUrl: database.url, dataDir: '.', maxConnections: 1 })
  t.teardown(() => store.close())
  const [row] = await store.sql<{ workers: string; mode: string }[]>`
    select current_setting('max_parallel_workers_per_gather') as workers, current_setting('plan_cache_mode') as mode`
  t.equal(row?.workers, '0', 'max_parallel_workers_per_gather reached Postgres')
  t.equal(row?.mode, 'auto', "Postgres's own plan cache: a prepared statement's generic plan is kept")
  // One connection: what it prepared is in its pg_prepared_statements.
  const parent = await createParentAccount(store.sql, { name: 'plans', externalId: null })
  const origin = operatorOrigin()
  await createSubAccountWithEvent(store.sql, origin, parent.id, { name: 'a', externalId: null, metadata: {} })
  await usageRows(store.sql, parent.id, { from: '2026-01-01', to: '2026-01-31', afterSeq: null, limit: 10 })
  await monthUse(store.sql, { level: 'account', tenantId: parent.id }, '2026-01')
  const prepared = await store.sql<{ statement: string }[]>`select statement from pg_prepared_statements`
  t.ok(
    prepared.some(
      ({ statement }) => statement.includes('insert into tenants') && statement.includes('insert into events'),
    ),
    'a change with its event is a prepared statement',
  )
  t.notOk(
    prepared.some(({ statement }) => statement.includes('usage_daily')),
    'the usage reads are not: Postgres plans them for their range each time',
  )
})

t.test('audit log pages over a range of time or of types are planned each time; the others keep theirs', async (t) => {
  // A generic plan guesses a range's share of the rows: after five pages of a narrow one it read
  // every event of a wide one and sorted them (450 ms at 1,000,000 events against 0.1).
  const store = await openStore({ databaseUrl: database.url, dataDir: '.', maxConnections: 1 })
  t.teardown(() => store.close())
  const parent = await createParentAccount(store.sql, { name: 'audit plans', externalId: null })
  const page: EventFilter = { limit: 10, beforeSeq: null, type: null, targetId: null, since: null, until: null }
  const ranged: [string, Partial<EventFilter>][] = [
    ['since', { since: new Date(0) }],
    ['until', { until: new Date() }],
    ['type prefix', { type: { prefix: 'api_key.' } }],
  ]
  const auditPages = async () =>
    (await store.sql<{ statement: string }[]>`select statement from pg_prepared_statements`)
      .map(({ statement }) => statement)
      .filter((statement) => statement.includes('from events'))
  for (const [, filter] of ranged) await listEvents(store.sql, parent.id, { ...page, ...filter })
  t.same(await auditPages(), [], `none of ${ranged.map(([what]) => what).join(', ')} is a prepared statement`)
  await listEvents(store.sql, parent.id, { ...page, type: { exact: 'api_key.created' } })
  const exactPrepared = (await auditPages()).length
  t.equal(exactPrepared, 1, 'a page of one type is: its plan is the same for every type')
})
