// The WebSocket connect step (src/proxy/steps/websocket-connect.ts): a dial that throws is the
// request's 500, and the places the step took under the route's caps go back with it. The step
// runner undoes only the steps before a throwing one, so the step gives back its own.
import type { FastifyReply, FastifyRequest } from 'fastify'
import t from 'tap'
import type { ProxyOptions } from '../../src/proxy/options.js'
import { loadRouteTable } from '../../src/proxy/route-table.js'
import { websocketConnectStep } from '../../src/proxy/steps/websocket-connect.js'
import { OpenSockets } from '../../src/proxy/websocket/open-sockets.js'
import { beginUpgrade } from '../../src/proxy/websocket/upgrade.js'

t.test('a dial that throws gives back the places the step took', async (t) => {
  const [route] = loadRouteTable(
    { routes: [{ prefix: '/live', upstream: 'http://127.0.0.1:9', websocket: true, max_websockets_per_tenant: 1 }] },
    undefined,
  )
  const sockets = new OpenSockets()
  const webSockets = { sockets, defaultMaxPerAccount: 10, awaitHandshake: () => {} }
  const step = websocketConnectStep(route!, { webSockets } as unknown as ProxyOptions)!
  const tenant = { id: 't1', parentId: 'p1' }
  // An offer that the handshake check refuses; taken here past it, ws's client throws on it.
  const headers = { host: 'a', 'sec-websocket-protocol': 'chat, chat' }
  const request = {
    raw: { upgrade: true, headers },
    headers,
    url: '/live/x',
    id: 'r1',
    protocol: 'http',
    socket: { remoteAddress: '127.0.0.1' },
    actingTenant: tenant,
    principal: { tenant, key: { id: 'k1', scopes: [] } },
    serviceIdentity: null,
  } as unknown as FastifyRequest
  t.equal(beginUpgrade(request), undefined, 'the upgrade begun')
  t.throws(() => step.check(request, {} as FastifyReply), /subprotocol/, 'ws throws on the offer')
  t.equal(
    sockets.reserve('/live', { tenantId: 't1', accountId: 'p1' }, 1, 10),
    null,
    "the tenant's one place is free again",
  )
})
