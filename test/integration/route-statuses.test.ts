// GET /v1/sub-accounts/routes (docs/api.md, Routes): each proxied route as the console's Routes
// screen shows it, over real upstreams on loopback: a target that refuses connections ejected by
// passive health, one failing its active checks, a route whose every target is out in panic, a
// route with one upstream listing none, and the CORS origins; never an upstream's address.
import { createServer } from 'node:http'
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import type { JsonBody } from '../helpers/json.js'
import { until } from '../helpers/poll.js'
import { listenOnLoopback, REFUSED_URL, startUpstream } from '../helpers/upstream.js'

const good = await startUpstream(t)
// Answers requests, fails its health checks.
const sick = createServer((request, response) => {
  response.writeHead(request.url === '/healthz' ? 500 : 200).end()
})
const sickUrl = `http://127.0.0.1:${(await listenOnLoopback(t, sick)).port}`
const CHECK = { path: '/healthz', interval_ms: 1000, timeout_ms: 500, healthy_after: 1, unhealthy_after: 1 }

const gw = await startGateway(t, {
  gatewayConfig: {
    routes: [
      {
        prefix: '/v1/balanced',
        targets: [{ url: good.url }, { url: REFUSED_URL, weight: 3 }],
        balance: 'round_robin',
        outlier: { eject_after: 1, max_ejected_percent: 50 },
      },
      { prefix: '/v1/checked', targets: [{ url: sickUrl }], health_check: CHECK },
      { prefix: '/v1/single', upstream: good.url, scopes: { read: ['things:read'] }, websocket: true },
      { prefix: '/v1/browser', upstream: good.url, cors: { origins: ['https://app.example.com'], credentials: true } },
      {
        prefix: '/v1/celled',
        targets: [{ url: good.url }],
        cells: {
          eu: { targets: [{ url: good.url }, { url: sickUrl, weight: 2 }] },
          us: { targets: [{ url: good.url }] },
        },
      },
    ],
  },
})
const parent = await gw.createParent()

async function routes(): Promise<JsonBody[]> {
  const res = await callAs(gw.url, parent.apiKey, { path: '/v1/sub-accounts/routes', acting: 'self' })
  if (res.status !== 200) throw new Error(`routes: ${res.status} ${res.body}`)
  return res.json().data as JsonBody[]
}
const routeOf = async (prefix: string) => (await routes()).find((route) => route.prefix === prefix)!

t.test('each route with its facts; a route with one upstream lists no target', async (t) => {
  const all = await routes()
  t.same(
    all.map((route) => route.prefix),
    ['/v1/balanced', '/v1/checked', '/v1/single', '/v1/browser', '/v1/celled'],
    "the route table's order",
  )
  t.same(all[2], {
    prefix: '/v1/single',
    public: false,
    scopes: { read: ['things:read'], write: [] },
    websocket: true,
    cors: null,
    balance: 'upstream',
    targets: [],
    panic: false,
  })
  t.same(all[3]!.cors, { origins: ['https://app.example.com'], credentials: true }, 'the CORS origins')
  const text = JSON.stringify(all)
  for (const url of [good.url, sickUrl, REFUSED_URL]) t.notOk(text.includes(url), `never an address (${url})`)
  t.notMatch(text, /127\.0\.0\.1/, 'nor a host')
})

t.test('a target that refuses connections is ejected by passive health; the route is not in panic', async (t) => {
  const before = await routeOf('/v1/balanced')
  t.same(before.targets, [
    { position: 1, weight: 1, cell: null, state: 'up' },
    { position: 2, weight: 3, cell: null, state: 'up' },
  ])
  // Round robin sends to the refusing target (weight 3) first; its connect failure is retried on the other.
  t.ok(
    await until(10_000, async () => {
      await callAs(gw.url, parent.apiKey, { path: '/v1/balanced/x', acting: 'self' })
      return (await routeOf('/v1/balanced')).targets[1].state === 'ejected'
    }),
    'the refusing target goes out',
  )
  const after = await routeOf('/v1/balanced')
  t.equal(after.targets[0].state, 'up', 'the other stays up')
  t.equal(after.panic, false, 'one target still up: no panic')
})

t.test('a target failing its active checks, alone on its route: failing_checks and panic', async (t) => {
  t.ok(
    await until(15_000, async () => (await routeOf('/v1/checked')).targets[0].state === 'failing_checks'),
    'out by its checks',
  )
  t.equal((await routeOf('/v1/checked')).panic, true, 'every target out: panic')
})

t.test("a route with cells lists its own targets, then each cell's, numbered within each", async (t) => {
  t.same((await routeOf('/v1/celled')).targets, [
    { position: 1, weight: 1, cell: null, state: 'up' },
    { position: 1, weight: 1, cell: 'eu', state: 'up' },
    { position: 2, weight: 2, cell: 'eu', state: 'up' },
    { position: 1, weight: 1, cell: 'us', state: 'up' },
  ])
})
