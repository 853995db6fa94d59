// Retries under load (docs/configuration.md, Retries), against four real upstreams on loopback: a
// steady one, a slow one, one flapping (three 503s, then three answers, over and over) and one
// killed partway (its connections reset, then refused). GETs and POSTs without Idempotency-Key in
// turn, eight at a time: every GET is answered, and no POST is sent twice (each upstream counts).
// A hung target (SIGSTOP) is measured by bench/upstream-retries.ts: its requests wait out
// timeout_ms, which a retry cannot follow (docs/decisions: what a retry counts as a failure).
import { randomBytes } from 'node:crypto'
import t from 'tap'
import { metricValue, startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { echo, startUpstream, type UpstreamHandler } from '../helpers/upstream.js'

const PREFIX = '/v1/fleet'
const REQUESTS = 400
const CONCURRENCY = 8

t.test('GETs under load see no error while a target flaps, one is slow and one is killed', async (t) => {
  const steady = await startUpstream(t)
  const slow = await startUpstream(t, (request, response, received) => {
    setTimeout(() => echo(request, response, received), 20)
  })
  let flaps = 0
  const flapping: UpstreamHandler = (request, response, received) => {
    if (Math.floor(flaps++ / 3) % 2 === 0) response.writeHead(503).end()
    else echo(request, response, received)
  }
  const flapper = await startUpstream(t, flapping)
  const killed = await startUpstream(t)
  const upstreams = [steady, slow, flapper, killed]
  const gw = await startGateway(t, {
    gatewayConfig: {
      routes: [
        {
          prefix: PREFIX,
          targets: upstreams.map((u) => ({ url: u.url })),
          retries: { attempts: 3, on: ['connect_failure', 'reset', 502, 503, 504], budget_percent: 50 },
        },
      ],
    },
  })
  const parent = await gw.createParent()
  const body = randomBytes(500)
  const statuses: Record<string, number[]> = { GET: [], POST: [] }
  let sent = 0
  let done = 0
  let killing: Promise<void> | null = null
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (sent < REQUESTS) {
        const method = sent++ % 2 === 0 ? 'GET' : 'POST'
        const res = await callAs(gw.url, parent.apiKey, {
          method,
          path: `${PREFIX}/x`,
          body: method === 'POST' ? body : undefined,
        })
        statuses[method]!.push(res.status)
        // A quarter in: the target is killed, requests in flight on it included.
        if (++done === REQUESTS / 4) killing = killed.close()
      }
    }),
  )
  await killing
  t.equal(statuses.GET!.length, REQUESTS / 2)
  t.same(
    statuses.GET!.filter((s) => s !== 200),
    [],
    'every GET answered 200',
  )
  const posts = upstreams.reduce((sum, u) => sum + u.received.filter((r) => r.method === 'POST').length, 0)
  t.equal(posts, REQUESTS / 2, 'each POST reached an upstream once: none sent twice')
  t.ok(
    statuses.POST!.every((s) => s === 200 || s === 502 || s === 503),
    `a POST fails only with its target's failure (${statuses.POST!.filter((s) => s !== 200).length} did)`,
  )
  t.ok(killed.received.length > 0 && flapper.received.length > 0, 'the failing targets had their share')
  t.ok(
    (await metricValue(gw.app, 'tgw_upstream_ejections_total', { route: PREFIX, target: killed.url })) >= 1,
    'passive health heard the attempts clients never saw fail, and took the killed target out',
  )
})
