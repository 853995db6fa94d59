// The registry of a replica's open sockets (proxy/websocket/open-sockets.ts): the per-tenant
// places, the per-route count, and finding sockets by key and by tenant. No I/O.
import t from 'tap'
import { OpenSockets, type TrackedSocket } from '../../src/proxy/websocket/open-sockets.js'

const socket = (route: string, keyId: string | null, ...tenantIds: string[]): TrackedSocket => ({
  route,
  keyId,
  tenantIds,
})

t.test('a tenant holds at most max places per route; a place given back is taken again', async (t) => {
  const sockets = new OpenSockets()
  t.ok(sockets.reserve('/a', 'T', 2))
  t.ok(sockets.reserve('/a', 'T', 2))
  t.notOk(sockets.reserve('/a', 'T', 2), 'the third is refused')
  t.ok(sockets.reserve('/b', 'T', 2), 'another route has its own')
  t.ok(sockets.reserve('/a', 'U', 2), 'another tenant has its own')
  sockets.unreserve('/a', 'T')
  t.ok(sockets.reserve('/a', 'T', 2), 'given back, taken again')
})

t.test('open sockets by route, by key and by tenant; closed ones are forgotten', async (t) => {
  const sockets = new OpenSockets()
  const one = socket('/a', 'k1', 'sub', 'parent')
  const two = socket('/a', 'k2', 'sub')
  const three = socket('/b', null)
  for (const s of [one, two, three]) sockets.opened(s)
  t.equal(sockets.openOn('/a'), 2)
  t.equal(sockets.openOn('/b'), 1)
  t.equal(sockets.size, 3)
  t.same([...sockets.withKey('k1')], [one])
  t.same([...sockets.withTenant('sub')], [one, two])
  t.same([...sockets.withTenant('parent')], [one])
  sockets.closed(one)
  sockets.closed(one)
  t.equal(sockets.openOn('/a'), 1, 'a second close changes nothing')
  t.same([...sockets.withKey('k1')], [], 'nothing left under the key')
  t.same([...sockets.withTenant('sub')], [two])
  t.same([...sockets.all()], [two, three])
})
