// The registry of a replica's open sockets (proxy/websocket/open-sockets.ts): the per-tenant and
// per-account places, the per-route count, and finding sockets by key and by tenant. No I/O.
import t from 'tap'
import { OpenSockets, type TrackedSocket } from '../../src/proxy/websocket/open-sockets.js'

const socket = (route: string, keyId: string | null, ...tenantIds: string[]): TrackedSocket => ({
  route,
  keyId,
  tenantIds,
})

t.test('a tenant holds at most max places per route; a place given back is taken again', async (t) => {
  const sockets = new OpenSockets()
  const T = { tenantId: 'T', accountId: 'P' }
  t.equal(sockets.reserve('/a', T, 2, 100), null)
  t.equal(sockets.reserve('/a', T, 2, 100), null)
  t.equal(sockets.reserve('/a', T, 2, 100), 'tenant', 'the third is refused')
  t.equal(sockets.reserve('/b', T, 2, 100), null, 'another route has its own')
  t.equal(sockets.reserve('/a', { tenantId: 'U', accountId: 'Q' }, 2, 100), null, 'another tenant has its own')
  sockets.unreserve('/a', T)
  t.equal(sockets.reserve('/a', T, 2, 100), null, 'given back, taken again')
})

t.test("a parent account's tenants together hold at most max places per route", async (t) => {
  const sockets = new OpenSockets()
  const as = (tenantId: string) => ({ tenantId, accountId: 'P' })
  t.equal(sockets.reserve('/a', as('P'), 2, 3), null, 'the parent as itself')
  t.equal(sockets.reserve('/a', as('S1'), 2, 3), null, 'as a sub-account')
  t.equal(sockets.reserve('/a', as('S2'), 2, 3), null, 'as another')
  t.equal(sockets.reserve('/a', as('S3'), 2, 3), 'account', 'a fourth sub-account buys no fourth socket')
  t.equal(sockets.reserve('/a', as('S1'), 2, 3), 'account', 'nor does a tenant under its own cap')
  t.equal(sockets.reserve('/b', as('S3'), 2, 3), null, 'another route has its own')
  t.equal(sockets.reserve('/a', { tenantId: 'S9', accountId: 'Q' }, 2, 3), null, 'another parent has its own')
  sockets.unreserve('/a', as('S2'))
  t.equal(sockets.reserve('/a', as('S3'), 2, 3), null, 'given back, taken again')
  t.equal(sockets.reserve('/a', as('S1'), 2, 9), null, "a refusal by the account's cap kept no tenant place")
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
