// No request can stop a replica (docs/api.md, "Upstream failures", "Time and connections"):
// every upstream fault × every way a client's body can go, on a public route and on a keyed one
// (test/helpers/faulty-exchanges.ts). After each combination the replica still answers /healthz
// and another tenant's request, the client got its answer (an aborting one is owed none), the
// gateway closed a connection whose body it did not read whole, and nothing the exchange started
// raised an error nobody listened for: the gateway runs in this process, where such an error
// would have ended it (it is caught here, to be named).
import { connect } from 'node:net'
import t from 'tap'
import { watchCrashes } from '../faults/crashes.js'
import {
  allowedAnswers,
  BODY_MODES,
  faultyClient,
  faultyRoutes,
  faultyUpstreams,
  judgeAnswer,
  UPSTREAM_FAULTS,
} from '../helpers/faulty-exchanges.js'
import { startGateway } from '../helpers/gateway.js'
import { recordLoopStalls } from '../helpers/loop-stalls.js'
import { until } from '../helpers/poll.js'
import { startUpstream } from '../helpers/upstream.js'
import { startWebSocketUpstream } from '../helpers/websocket.js'

/** Small, so that each timer fires within the test: the body's idle timer and the route's timeout. */
const BODY_IDLE_MS = 300
const TIMEOUT_MS = 700
/** How long a client waits for the gateway to close a connection: far past every timer. */
const CLOSE_LIMIT_MS = 10_000

/** Errors nobody listened for: in production each would have ended the process. */
const crashes = watchCrashes(t)

const healthy = await startUpstream(t)
const urls = await faultyUpstreams(t, TIMEOUT_MS)
// Holds each upgrade unanswered until the test releases it: the upgrade waits on a step.
const webSockets = await startWebSocketUpstream(t, { holdHandshakes: true })
const gw = await startGateway(t, {
  gatewayConfig: {
    routes: [
      { prefix: '/healthy', upstream: healthy.url },
      { prefix: '/ws/public', upstream: webSockets.url, websocket: true, public: true },
      { prefix: '/ws/keyed', upstream: webSockets.url, websocket: true },
      ...faultyRoutes(urls, { timeout_ms: TIMEOUT_MS, body_idle_timeout_ms: BODY_IDLE_MS }),
    ],
  },
})
const tenant = await gw.createParent({ name: 'sends the faulty requests' })
const other = await gw.createParent({ name: 'another tenant' })

/** What keeps the replica from serving: nothing, when it answers /healthz and another tenant's request. */
async function stillServes(): Promise<string[]> {
  const problems: string[] = []
  try {
    const health = await fetch(`${gw.url}/healthz`)
    if (health.status !== 200) problems.push(`/healthz answered ${health.status}`)
    await health.arrayBuffer()
    const theirs = await fetch(`${gw.url}/healthy/x`, { headers: { authorization: `Bearer ${other.apiKey}` } })
    if (theirs.status !== 200) problems.push(`another tenant's request answered ${theirs.status}`)
    await theirs.arrayBuffer()
  } catch (error) {
    problems.push(`the replica did not answer: ${(error as Error).message}`)
  }
  return problems
}

/** Upstream slots held or waited for on the faulty routes: 0 once their exchanges are over. */
function slotsInUse(): number {
  let inUse = 0
  for (const [prefix, read] of gw.app.metrics.proxy.upstreamSlots) {
    if (prefix === '/healthy') continue
    const { held, waiting } = read()
    inUse += held + waiting
  }
  return inUse
}

for (const fault of UPSTREAM_FAULTS) {
  t.test(`upstream ${fault}`, async (t) => {
    const combinations = (['public', 'keyed'] as const).flatMap((route) => BODY_MODES.map((mode) => ({ route, mode })))
    // Each combination on a connection of its own, all at once: none waits for another's timer.
    // Stalls of this process's loop, which the gateway shares (test/helpers/loop-stalls.ts).
    const loopStalls = recordLoopStalls(100)
    t.teardown(() => loopStalls.stop())
    await Promise.all(
      combinations.map(async ({ route, mode }) => {
        const what = `${route} route, body ${mode}`
        const key = route === 'public' ? null : tenant.apiKey
        const outcome = await faultyClient(gw.port, `/${route}/${fault}/x`, key, mode, CLOSE_LIMIT_MS)
        if (mode !== 'aborts') {
          const allowed = allowedAnswers(fault, mode)
          t.not(
            judgeAnswer(
              fault,
              mode,
              outcome,
              { bodyIdleMs: BODY_IDLE_MS, timeoutMs: TIMEOUT_MS },
              loopStalls.recorded(),
            ),
            'wrong',
            `${what}: answered ${allowed.join(' or ')} (got ${JSON.stringify(outcome.text.slice(0, 40))})`,
          )
          t.ok(outcome.ended, `${what}: the exchange ended (the connection closed, or the answer came whole)`)
        }
        t.same(await stillServes(), [], `${what}: the replica still answers /healthz and another tenant`)
      }),
    )
    // A body's timer left running fires BODY_IDLE_MS after its last byte: while a client whose
    // connection the gateway left open still waits (CLOSE_LIMIT_MS) for it to close.
    t.ok(await until(CLOSE_LIMIT_MS, async () => slotsInUse() === 0), 'every slot of the faulty routes came back')
    t.same(crashes, [], 'nothing the exchanges started raised an error that nobody listened for')
    crashes.length = 0
  })
}

/** A WebSocket upgrade's request head, as a raw client writes it. */
function upgradeHead(path: string, keyed: boolean): string {
  return [
    `GET ${path} HTTP/1.1`,
    'Host: gateway.test',
    ...(keyed ? [`Authorization: Bearer ${tenant.apiKey}`] : []),
    'Upgrade: websocket',
    'Connection: Upgrade',
    'Sec-WebSocket-Version: 13',
    'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==',
    '',
    '',
  ].join('\r\n')
}

t.test('a WebSocket upgrade whose client resets while a step waits', async (t) => {
  // Node hands an upgrade's connection over without its error listener; the steps hold it while
  // the upstream's handshake is under way, and the client resets it meanwhile.
  const clients = (['public', 'keyed'] as const).map((route) => {
    const socket = connect(gw.port, '127.0.0.1')
    socket.on('error', () => {})
    socket.write(upgradeHead(`/ws/${route}/x`, route === 'keyed'))
    return socket
  })
  t.ok(
    await until(CLOSE_LIMIT_MS, async () => webSockets.held() === 2),
    "both upgrades wait for the upstream's handshake",
  )
  for (const socket of clients) socket.resetAndDestroy()
  // Each reset is an error on its connection, then its close: the upgrade's slot comes back.
  t.ok(await until(CLOSE_LIMIT_MS, async () => slotsInUse() === 0), 'both upgrades gave their slots back')
  webSockets.release()
  t.same(await stillServes(), [], 'the replica still answers /healthz and another tenant')
  t.same(crashes, [], 'the resets raised no error that nobody listened for')
})

t.test('an upgrade on a path the gateway answers itself, reset by its client', async (t) => {
  // Every upgrade goes through the router once a route takes WebSockets: the management API's,
  // the portal's and the token endpoint's paths too, where no proxy step gives the connection a
  // listener. Resets land at whatever point each request has reached, so there are many.
  const paths = ['/v1/sub-accounts', '/portal/api/session', '/oauth2/token', '/healthz']
  const closed: Promise<void>[] = []
  for (let i = 0; i < 200; i++) {
    const socket = connect(gw.port, '127.0.0.1')
    socket.on('error', () => {})
    closed.push(new Promise((resolve) => socket.once('close', () => resolve())))
    socket.write(
      upgradeHead(paths[i % paths.length]!, true),
      // Written, then reset: the gateway reads the head and meets the reset as it answers.
      () => setImmediate(() => socket.resetAndDestroy()),
    )
  }
  await Promise.all(closed)
  t.same(await stillServes(), [], 'the replica still answers /healthz and another tenant')
  t.same(crashes, [], 'the resets raised no error that nobody listened for')
})
