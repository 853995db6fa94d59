// A client that pipelines requests and hangs up before the first is answered: the answers queued
// behind it never get the connection's socket. On Node 22 (which package.json allows) Node says
// nothing of them, so each left an upstream slot held for good, and a client could shut a route
// to its tenant, then to everyone (http/queued-answer.ts). Every slot comes back.
import { connect } from 'node:net'
import t from 'tap'
import { metricValue, startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { until } from '../helpers/poll.js'
import { echo, startUpstream } from '../helpers/upstream.js'

for (const how of ['reset', 'half-close'] as const)
  t.test(`a ${how} behind a slow answer gives back every pipelined request slot`, async (t) => {
    // Holds each /slow request until the round lets it go; answers the rest at once.
    let holding: (() => void)[] = []
    const upstream = await startUpstream(t, (request, response, received) => {
      if (request.url!.startsWith('/v1/p/slow')) holding.push(() => echo(request, response, received))
      else echo(request, response, received)
    })
    const release = () => {
      for (const answer of holding) answer()
      holding = []
    }
    const gw = await startGateway(t, {
      gatewayConfig: { routes: [{ prefix: '/v1/p', upstream: upstream.url, max_connections: 8 }] },
    })
    const parent = await gw.createParent()
    const held = () => metricValue(gw.app, 'tgw_proxy_upstream_slots', { route: '/v1/p', state: 'held' })
    const get = (path: string) =>
      `GET ${path} HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer ${parent.apiKey}\r\nX-Service-Acting-Tenant: self\r\n\r\n`

    for (let round = 1; round <= 3; round++) {
      const seen = upstream.received.length
      const socket = connect(Number(new URL(gw.url).port), '127.0.0.1')
      socket.on('error', () => {})
      socket.write(get('/v1/p/slow') + get('/v1/p/fast'))
      // The slow one held by the upstream, the one behind it answered: its answer waits, queued.
      t.ok(await until(5000, async () => upstream.received.length === seen + 2), `round ${round}: both upstream`)
      t.equal(await held(), 2, `round ${round}: two slots held`)
      if (how === 'reset') socket.destroy()
      else socket.end()
      release()
      t.ok(await until(5000, async () => (await held()) === 0), `round ${round}: every slot given back`)
    }
    const after = await callAs(gw.url, parent.apiKey, { path: '/v1/p/after', acting: 'self' })
    t.equal(after.status, 200, 'the route serves as before')
  })
