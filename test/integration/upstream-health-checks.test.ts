// Active health checks (proxy/upstreams/health-check.ts) against real sockets on loopback: a
// target that refuses connections, answers a wrong status or too late fails its checks; one that
// answers a listed status passes.
import { createServer } from 'node:http'
import t from 'tap'
import { Pool } from 'undici'
import { HealthChecks, passes } from '../../src/proxy/upstreams/health-check.js'
import { until } from '../helpers/poll.js'
import { listenOnLoopback, REFUSED_URL } from '../helpers/upstream.js'

const OPTIONS = { path: '/healthz', intervalMs: 20, timeoutMs: 200, healthyAfter: 2, unhealthyAfter: 2, statuses: null }

t.test('passes: a listed status, or any 2xx without a list', async (t) => {
  t.ok(passes(OPTIONS, 204))
  t.notOk(passes(OPTIONS, 301))
  t.ok(passes({ ...OPTIONS, statuses: [418] }, 418))
  t.notOk(passes({ ...OPTIONS, statuses: [418] }, 200))
})

t.test('a refused, a slow and a failing target go out; a passing one comes back', async (t) => {
  let status = 200
  let hang = false
  const seen: string[] = []
  const server = createServer((request, response) => {
    seen.push(`${request.method} ${request.url} ${request.headers['user-agent']}`)
    if (!hang) response.writeHead(status).end()
  })
  const { port } = await listenOnLoopback(t, server)
  const pool = new Pool(`http://127.0.0.1:${port}`)
  const refusedPool = new Pool(REFUSED_URL)
  t.teardown(() => Promise.all([pool.destroy(), refusedPool.destroy()]))
  const target = { pool, host: `127.0.0.1:${port}`, healthy: true }
  const refused = { pool: refusedPool, host: 'x', healthy: true }
  const checks = new HealthChecks(OPTIONS, [target, refused])
  t.teardown(() => checks.close())
  t.ok(await until(5000, async () => !refused.healthy), 'refused: out')
  t.ok(await until(5000, async () => seen.length >= 3), 'checked again and again')
  t.equal(seen[0], 'GET /healthz tenancy-gateway-health-check')
  t.ok(target.healthy)
  status = 500
  t.ok(await until(5000, async () => !target.healthy), 'a failing status: out')
  status = 200
  t.ok(await until(5000, async () => target.healthy), 'passing again: back')
  hang = true
  t.ok(await until(5000, async () => !target.healthy), 'no answer within timeout_ms: out')
})
