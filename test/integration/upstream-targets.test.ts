// A route over several targets (docs/configuration.md, routes: `targets`), against real upstreams
// on loopback: the weights of round_robin exactly, least_request away from a target holding
// requests, tenant_hash keeping each tenant on its target and moving only a lost target's tenants,
// passive health taking a killed target out after its fifth failure and trying it again after the
// back-off (on a clock the test moves), the cap on targets out, active checks, and the panic.
import { createServer } from 'node:http'
import t, { type Test } from 'tap'
import { metricValue, type Parent, startGateway, type TestGateway } from '../helpers/gateway.js'
import { subAccountVia } from '../helpers/gateway-load.js'
import { until } from '../helpers/poll.js'
import { listenOn, stablePort } from '../helpers/ports.js'
import { openSocket, startWebSocketUpstream } from '../helpers/websocket.js'
import { echo, holdingUpstream, startUpstream, type Upstream } from '../helpers/upstream.js'

const PREFIX = '/v1/things'

interface Setup {
  gw: TestGateway
  parent: Parent
  /** The passive health's clock, in ms: the test moves it. */
  clock: { now: number }
}

async function gatewayWith(t: Test, route: Record<string, unknown>): Promise<Setup> {
  const clock = { now: Date.now() }
  const gw = await startGateway(t, {
    gatewayConfig: { routes: [{ prefix: PREFIX, ...route }] },
    upstreamClock: () => clock.now,
  })
  return { gw, parent: await gw.createParent(), clock }
}

/** One GET through the gateway; its status. */
async function get(setup: Setup, acting?: string): Promise<number> {
  const res = await setup.gw.call(setup.parent.apiKey, { method: 'GET', url: `${PREFIX}/x`, acting })
  return res.statusCode
}

const up = (setup: Setup, target: string) =>
  metricValue(setup.gw.app, 'tgw_upstream_target_up', { route: PREFIX, target })

t.test('round_robin gives each target exactly its weight', async (t) => {
  const upstreams = await Promise.all([1, 2, 3].map(() => startUpstream(t)))
  const setup = await gatewayWith(t, {
    targets: upstreams.map((u, i) => ({ url: u.url, weight: i + 1 })),
    balance: 'round_robin',
  })
  for (let i = 0; i < 60; i++) t.equal(await get(setup), 200)
  t.same(
    upstreams.map((u) => u.received.length),
    [10, 20, 30],
    'requests in the ratio 1:2:3, to the request',
  )
  t.equal(upstreams[0]!.received[0]!.headers.host, new URL(upstreams[0]!.url).host, 'each target gets its own Host')
})

t.test('least_request sends away from a target holding requests', async (t) => {
  const holding = await holdingUpstream(t, { holdPrefix: PREFIX, delayMs: [0, 0] })
  const quick = await startUpstream(t)
  const setup = await gatewayWith(t, { targets: [{ url: holding.url }, { url: quick.url }] })
  const pending: Promise<unknown>[] = []
  for (let i = 1; i <= 20; i++) {
    pending.push(get(setup))
    // Each request is where it goes (held, or answered) before the next is sent.
    t.ok(await until(5_000, async () => holding.held() + quick.received.length === i))
  }
  t.ok(holding.held() <= 1, `at most the first request went to the target holding it (${holding.held()})`)
  t.ok(quick.received.length >= 19, 'the others went to the free one')
  holding.release()
  await Promise.all(pending)
})

t.test('tenant_hash keeps a tenant on one target; losing a target moves only its tenants', async (t) => {
  let healthy = true
  const upstreams = await Promise.all(
    [0, 1, 2].map(() =>
      startUpstream(t, (request, response, received) => {
        if (request.url === '/healthz') {
          response.writeHead(healthy || upstreams[2]!.url !== `http://${request.headers.host}` ? 200 : 503).end()
          return
        }
        echo(request, response, received)
      }),
    ),
  )
  const setup = await gatewayWith(t, {
    targets: upstreams.map((u) => ({ url: u.url })),
    balance: 'tenant_hash',
    health_check: { path: '/healthz', interval_ms: 1000, healthy_after: 1, unhealthy_after: 1 },
  })
  const tenants: string[] = []
  for (let i = 0; i < 40; i++) tenants.push(await subAccountVia(setup.gw.url, setup.parent.apiKey, `tenant ${i}`))

  /** Where each tenant's requests went: the index of the one target that got them all. */
  async function placement(): Promise<number[]> {
    const where: number[] = []
    for (const tenant of tenants) {
      const before = upstreams.map((u) => u.received.filter((r) => r.url !== '/healthz').length)
      for (let i = 0; i < 2; i++) t.equal(await get(setup, tenant), 200)
      const got = upstreams.map((u, j) => u.received.filter((r) => r.url !== '/healthz').length - before[j]!)
      const only = got.indexOf(2)
      t.ok(only !== -1, `a tenant's requests went to one target (${got})`)
      where.push(only)
    }
    return where
  }
  const first = await placement()
  t.ok(new Set(first).size === 3, 'the tenants spread over the three targets')

  healthy = false
  t.ok(await until(10_000, async () => (await up(setup, upstreams[2]!.url)) === 0), 'the failing checks take it out')
  const second = await placement()
  first.forEach((was, i) => {
    if (was === 2) t.not(second[i], 2, "a lost target's tenant moved")
    else t.equal(second[i], was, 'every other tenant stayed where it was')
  })

  healthy = true
  t.ok(await until(10_000, async () => (await up(setup, upstreams[2]!.url)) === 1), 'passing checks put it back')
  t.same(await placement(), first, 'its tenants came back to it')
})

/** A target that can be killed (nothing listens) and brought back on the same port. */
async function killable(t: Test): Promise<{ url: string; received: () => number; start(): Promise<void> }> {
  const port = await stablePort()
  let received = 0
  const server = createServer((request, response) => {
    received++
    echo(request, response, {
      method: 'GET',
      url: request.url!,
      headers: {},
      rawHeaders: [],
      bodyBytes: 0,
      bodySha256: '',
    })
  })
  t.teardown(() => new Promise<void>((resolve) => (server.listening ? server.close(() => resolve()) : resolve())))
  return {
    url: `http://127.0.0.1:${port}`,
    received: () => received,
    start: () => listenOn(server, port),
  }
}

t.test('a killed target is ejected at its fifth failure, then tried with one request after its back-off', async (t) => {
  const live = await Promise.all([0, 1].map(() => startUpstream(t)))
  const dead = await killable(t)
  const setup = await gatewayWith(t, {
    targets: [{ url: live[0]!.url }, { url: live[1]!.url }, { url: dead.url }],
    balance: 'round_robin',
    // Each failure reaches the client, to be counted (a retry would answer it from another target).
    retries: { attempts: 0 },
  })
  const ejections = () => metricValue(setup.gw.app, 'tgw_upstream_ejections_total', { route: PREFIX, target: dead.url })
  t.equal(await ejections(), 0, 'the series shows before the first ejection')
  const statuses: number[] = []
  for (let i = 0; i < 45; i++) statuses.push(await get(setup))
  t.equal(statuses.filter((s) => s === 502).length, 5, 'five failures, then no more: it is out')
  t.same(statuses.slice(15), Array(30).fill(200), 'after the fifth failure every request is answered')
  t.equal(await ejections(), 1)
  t.equal(await up(setup, dead.url), 0, 'tgw_upstream_target_up says it is out')

  // Still dead when its 30 s are over: one trial request, which fails, and it is out again (60 s).
  setup.clock.now += 30_000
  const trial: number[] = []
  for (let i = 0; i < 30; i++) trial.push(await get(setup))
  t.equal(trial.filter((s) => s === 502).length, 1, 'one trial request, and no more')
  t.equal(await ejections(), 2, 'the failed trial took it out again')

  setup.clock.now += 30_000
  t.equal(await get(setup), 200)
  t.equal(dead.received(), 0, 'the second ejection lasts longer: 60 s')

  await dead.start()
  setup.clock.now += 30_000
  for (let i = 0; i < 30; i++) t.equal(await get(setup), 200)
  t.equal(dead.received(), 10, 'back: its trial passed, and it takes its share again')
  t.equal(await up(setup, dead.url), 1)
})

t.test('at most max_ejected_percent of the targets are out at once', async (t) => {
  const live = await startUpstream(t)
  const dead = [await killable(t), await killable(t)]
  const setup = await gatewayWith(t, {
    targets: [{ url: live.url }, ...dead.map((d) => ({ url: d.url }))],
    balance: 'round_robin',
    outlier: { eject_after: 2 },
    retries: { attempts: 0 },
  })
  const statuses: number[] = []
  for (let i = 0; i < 30; i++) statuses.push(await get(setup))
  const ups = await Promise.all(dead.map((d) => up(setup, d.url)))
  t.same(ups.sort(), [0, 1], 'one of the dead targets is out, the other not (50 % of 3 is 1)')
  t.ok(statuses.slice(-10).includes(502), 'the one kept in still gets its share')
  t.equal(await metricValue(setup.gw.app, 'tgw_upstream_panic', { route: PREFIX }), 0)
})

t.test('when every target is out, requests go to all of them and the route says so', async (t) => {
  let healthy = true
  const upstreams: Upstream[] = await Promise.all(
    [0, 1].map(() =>
      startUpstream(t, (request, response, received) => {
        if (request.url === '/healthz') response.writeHead(healthy ? 204 : 500).end()
        else echo(request, response, received)
      }),
    ),
  )
  const setup = await gatewayWith(t, {
    targets: upstreams.map((u) => ({ url: u.url })),
    health_check: { path: '/healthz', interval_ms: 1000, healthy_after: 1, unhealthy_after: 1, statuses: [204] },
  })
  const panic = () => metricValue(setup.gw.app, 'tgw_upstream_panic', { route: PREFIX })
  t.equal(await panic(), 0)
  healthy = false
  t.ok(await until(10_000, async () => (await panic()) === 1), 'tgw_upstream_panic is 1 once both fail their checks')
  const before = upstreams.map((u) => u.received.filter((r) => r.url !== '/healthz').length)
  for (let i = 0; i < 40; i++) t.equal(await get(setup), 200, 'still answered')
  const got = upstreams.map((u, i) => u.received.filter((r) => r.url !== '/healthz').length - before[i]!)
  t.ok(
    got.every((n) => n > 0),
    `sent to all of them (${got})`,
  )
  healthy = true
  t.ok(await until(10_000, async () => (await panic()) === 0), 'and back to 0 when they pass')
})

t.test('WebSockets on a route with targets are balanced too', async (t) => {
  const upstreams = await Promise.all([0, 1].map(() => startWebSocketUpstream(t)))
  const setup = await gatewayWith(t, {
    targets: upstreams.map((u) => ({ url: u.url })),
    balance: 'round_robin',
    websocket: true,
  })
  for (let i = 0; i < 4; i++) {
    const socket = await openSocket(t, `${setup.gw.url}${PREFIX}/live`, { key: setup.parent.apiKey })
    socket.ws.send('ping')
    t.equal(await socket.next(), 'ping')
  }
  t.same(
    upstreams.map((u) => u.upgrades.length),
    [2, 2],
    'two upgrades each',
  )
  t.equal(upstreams[1]!.upgrades[0]!.host, `127.0.0.1:${upstreams[1]!.port}`, "each target's own Host")
})

t.test("a Location naming the target that answered is moved under the route's prefix", async (t) => {
  const upstreams = await Promise.all(
    [0, 1].map(() =>
      startUpstream(t, (request, response) => {
        response.writeHead(302, { location: `http://${request.headers.host}${PREFIX}/next` }).end()
      }),
    ),
  )
  const setup = await gatewayWith(t, { targets: upstreams.map((u) => ({ url: u.url })), balance: 'round_robin' })
  for (let i = 0; i < 2; i++) {
    const res = await setup.gw.call(setup.parent.apiKey, { method: 'GET', url: `${PREFIX}/x` })
    t.equal(res.headers.location, `${PREFIX}/next`)
  }
  t.same(
    upstreams.map((u) => u.received.length),
    [1, 1],
    'one from each target',
  )
})

t.test('a public route with targets balances its requests too', async (t) => {
  const upstreams = await Promise.all([0, 1].map(() => startUpstream(t)))
  const setup = await gatewayWith(t, { targets: upstreams.map((u) => ({ url: u.url })), public: true })
  for (let i = 0; i < 20; i++) {
    const res = await setup.gw.call(null, { method: 'GET', url: `${PREFIX}/x` })
    t.equal(res.statusCode, 200)
  }
  t.equal(upstreams[0]!.received.length + upstreams[1]!.received.length, 20, 'every request to one of them')
})
