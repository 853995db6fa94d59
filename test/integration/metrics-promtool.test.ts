// The metrics text a gateway serves on METRICS_PORT passes `promtool check metrics`, Prometheus's
// own lint (docs/operations.md): names, units, `_total` on counters only, HELP on every metric.
// Counted as main.ts counts (the process's metrics too), after some traffic of every kind, so
// that the labelled series exist. CI installs promtool (Debian's prometheus package, .ci/run).
import { spawnSync } from 'node:child_process'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { createMetrics } from '../../src/ops/metrics.js'
import { serveMetrics } from '../../src/ops/metrics-server.js'
import { DROPPED_DEFAULT_METRICS } from '../../src/ops/process-metrics.js'
import { startGateway } from '../helpers/gateway.js'
import { callAs, rawRequest } from '../helpers/http.js'
import { accessToken, clientKey } from '../helpers/tokens.js'
import { startUpstream } from '../helpers/upstream.js'

/** promtool's verdict on `text`: its exit status and every line it wrote, or null when it is not installed. */
function promtoolCheck(text: string): { status: number | null; lines: string[] } | null {
  const run = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' })
  if ((run.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT') return null
  if (run.error !== undefined) throw run.error
  const lines = `${run.stdout}${run.stderr}`.split('\n').filter((line) => line.trim() !== '')
  return { status: run.status, lines }
}

t.test('promtool finds nothing to say about /metrics after traffic', async (t) => {
  const upstream = await startUpstream(t)
  const metrics = createMetrics({ processMetrics: true })
  const gw = await startGateway(t, {
    metrics,
    gatewayConfig: {
      routes: [
        { prefix: '/v1/orders', upstream: upstream.url },
        // A route that carries WebSockets: tgw_websockets_open has a series.
        { prefix: '/v1/live', upstream: upstream.url, websocket: true },
      ],
    },
  })
  const parent = await gw.createParent()
  const client = await clientKey(gw.url, parent)
  const token = await accessToken(gw.url, client)
  const answers = [
    (await callAs(gw.url, parent.apiKey, { path: '/v1/sub-accounts' })).status,
    (await callAs(gw.url, client.apiKey, { path: '/v1/orders/1' })).status,
    (await callAs(gw.url, token, { path: '/v1/orders/2' })).status,
    (await callAs(gw.url, 'tgw_not-a-key', { path: '/v1/orders/3' })).status,
    (await rawRequest(gw.url, { path: '/nowhere' })).status,
    (await rawRequest(gw.url, { path: '/a//b' })).status,
    (await rawRequest(gw.url, { path: '/readyz' })).status,
  ]
  t.same(answers, [200, 200, 200, 401, 404, 400, 200], 'management, proxied (key, token), refused, 404, 400, ops')

  // Served as main.ts serves it, on a port of its own.
  const server = await serveMetrics(metrics.registry, 0, '127.0.0.1')
  t.teardown(() => new Promise((resolve) => server.close(resolve)))
  const res = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`)
  t.equal(res.status, 200)
  const text = await res.text()
  for (const name of ['tgw_http_requests_total', 'tgw_signatures_total', 'process_cpu_seconds_total']) {
    t.match(text, new RegExp(`^# TYPE ${name} counter$`, 'm'), `${name} is there`)
  }
  t.match(text, /^tgw_websockets_open\{route="\/v1\/live"\} 0$/m, 'tgw_websockets_open, by route')
  for (const name of ['nodejs_active_handles', 'nodejs_active_requests', 'nodejs_active_resources']) {
    t.match(text, new RegExp(`^# TYPE ${name} gauge$`, 'm'), `${name}, by type, stays`)
  }
  // The Redis master in use, the failovers seen, and the waits on Redis, with their series.
  t.match(text, /^tgw_redis_master\{address="[^"]+:\d+"\} 1$/m, 'tgw_redis_master names the master')
  t.match(text, /^# TYPE tgw_redis_master_changes_total counter$/m, 'tgw_redis_master_changes_total is there')
  t.match(
    text,
    /^tgw_redis_wait_seconds_bucket\{le="0\.05",wait="lookup"\} \d+$/m,
    'tgw_redis_wait_seconds has lookups',
  )
  for (const name of DROPPED_DEFAULT_METRICS) t.notMatch(text, new RegExp(`^${name}\\b`, 'm'), `no ${name}`)

  const check = promtoolCheck(text)
  if (check === null) {
    t.fail('promtool is not installed: apt-get install prometheus (Debian; CI installs it)')
    return
  }
  t.same(check.lines, [], 'promtool check metrics says nothing')
  t.equal(check.status, 0, 'and exits 0')
})
