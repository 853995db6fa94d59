// Active health checks (proxy/upstreams/health-check.ts) against real sockets on loopback: a
// target that refuses connections, answers a wrong status or too late fails its checks; one that
// answers a listed status passes.
import { createServer } from 'node:http'
import t from 'tap'
import { Pool } from 'undici'
import { HealthChecks, passes } from '../../src/proxy/upstreams/health-check.js'
import { RouteUpstreams } from '../../src/proxy/upstreams/route-upstreams.js'
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
  const target = { checkPool: pool, host: `127.0.0.1:${port}`, healthy: true }
  const refused = { checkPool: refusedPool, host: 'x', healthy: true }
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

t.test('a target whose every connection carries a long answer is busy, not down', async (t) => {
  // Its pool's two connections each hold an answer that streams for as long as the test runs: the
  // checks go over a connection of their own, and pass.
  const streams = new Set<import('node:http').ServerResponse>()
  const server = createServer((request, response) => {
    if (request.url === '/healthz') return void response.writeHead(200).end()
    response.writeHead(200)
    response.write('a first piece')
    streams.add(response)
  })
  const { port } = await listenOnLoopback(t, server)
  const url = `http://127.0.0.1:${port}`
  const upstreams = new RouteUpstreams(
    {
      targets: [{ url, weight: 1 }],
      balance: 'round_robin',
      outlier: { ejectAfter: 5, maxEjectedPercent: 50 },
      healthCheck: { ...OPTIONS, unhealthyAfter: 1 },
    },
    { makePool: (origin, connections = 2) => new Pool(origin, { connections }) },
  )
  t.teardown(async () => {
    for (const response of streams) response.end()
    await upstreams.destroy()
  })
  const target = upstreams.targets[0]!
  const held = [0, 1].map(() => target.pool.request({ method: 'GET', path: '/stream' }))
  const answers = await Promise.all(held)
  t.ok(await until(5000, async () => streams.size === 2), 'both connections carry a stream')
  // Enough checks to have taken it out at the first failure (unhealthy_after 1, timeout_ms 200).
  let checks = 0
  server.on('request', (request) => {
    if (request.url === '/healthz') checks++
  })
  t.ok(await until(5000, async () => checks >= 5), 'checked again and again meanwhile')
  t.ok(target.healthy, 'and never taken out')
  for (const answer of answers) answer.body.destroy()
})
