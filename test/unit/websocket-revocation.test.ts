// Which open sockets an invalidation or the sweep closes, and why (proxy/websocket/revocation.ts,
// sweep.ts), over stand-in sockets and lookups: no I/O. The sockets' own expiry timers are here too.
import { EventEmitter } from 'node:events'
import t from 'tap'
import type { WebSocket } from 'ws'
import { OpenSockets } from '../../src/proxy/websocket/open-sockets.js'
import { type CredentialSources, recheck, revocationListener } from '../../src/proxy/websocket/revocation.js'
import { CredentialSweep } from '../../src/proxy/websocket/sweep.js'
import { type SocketCredentials, SocketPair } from '../../src/proxy/websocket/socket-pair.js'
import type { KeyRecord, TenancyLookups, TenantRecord } from '../../src/shared/tenancy-records.js'
import { until } from '../helpers/poll.js'

/** A socket that records the close it was asked for. */
class StandIn extends EventEmitter {
  readonly CONNECTING = 0
  readonly OPEN = 1
  readyState = 1
  closes: [number | undefined, string | undefined][] = []
  close(code?: number, reason?: string): void {
    this.closes.push([code, reason])
    this.readyState = 2
  }
  terminate(): void {
    this.readyState = 3
  }
  /** A side held back reads again before it is closed (socket-pair.ts): nothing to record. */
  resume(): void {}
}

const OPTIONS = { maxPerTenant: 10, maxPerAccount: null, idleTimeoutMs: 60_000, maxMessageBytes: 1024 }

function pair(credentials: Partial<SocketCredentials>): { pair: SocketPair; client: StandIn } {
  const client = new StandIn()
  const upstream = new StandIn()
  const made = new SocketPair(
    '/live',
    client as unknown as WebSocket,
    upstream as unknown as WebSocket,
    {
      keyId: 'k1',
      keyTenantId: 'sub',
      actingTenantId: 'sub',
      keyExpiresAt: null,
      tokenExpiresAt: null,
      tokenKid: null,
      ...credentials,
    },
    OPTIONS,
    () => {},
  )
  t.teardown(() => client.emit('close', 1000, Buffer.alloc(0)))
  return { pair: made, client }
}

/** Where the checks read, and how many times each was asked; `withdrawn`: signing keys a rotation withdrew. */
function lookups(
  keys: Record<string, Partial<KeyRecord> | null>,
  tenants: Record<string, Partial<TenantRecord> | null>,
  withdrawn: string[] = [],
): CredentialSources & { asked: string[] } {
  const asked: string[] = []
  const key = (id: string): KeyRecord | null =>
    keys[id] === null ? null : { id, tenantId: 'sub', scopes: [], status: 'active', expiresAt: null, ...keys[id] }
  const tenant = (id: string): TenantRecord | null =>
    tenants[id] === null ? null : { id, parentId: 'parent', externalId: null, status: 'active', ...tenants[id] }
  return {
    asked,
    lookups: {
      keyById: async (id: string) => {
        asked.push(`key ${id}`)
        return key(id)
      },
      tenant: async (id: string) => {
        asked.push(`tenant ${id}`)
        return tenant(id)
      },
    } as unknown as TenancyLookups,
    signingKeyAccepted: (kid) => !withdrawn.includes(kid),
  }
}

t.test('a check closes a socket whose credentials no longer hold, with the reason', async (t) => {
  const cases: [string, CredentialSources, string | undefined][] = [
    ['all well', lookups({ k1: {} }, {}), undefined],
    ['revoked', lookups({ k1: { status: 'revoked' } }, {}), 'credentials revoked'],
    ['gone', lookups({ k1: null }, {}), 'credentials revoked'],
    ['expired', lookups({ k1: { expiresAt: Date.now() - 1 } }, {}), 'credentials revoked'],
    ['tenant deactivated', lookups({ k1: {} }, { sub: { status: 'deactivated' } }), 'tenant deactivated'],
    ['tenant gone', lookups({ k1: {} }, { sub: null }), 'tenant deactivated'],
  ]
  for (const [what, source, reason] of cases) {
    const { pair: made, client } = pair({})
    await recheck(made, source)
    t.same(client.closes, reason === undefined ? [] : [[1008, reason]], what)
  }
  const { pair: parentActing, client } = pair({ keyTenantId: 'parent', actingTenantId: 'sub' })
  await recheck(parentActing, lookups({ k1: { tenantId: 'parent' } }, { sub: { status: 'deactivated' } }))
  t.same(client.closes, [[1008, 'tenant deactivated']], 'the tenant it acts as, not only its key’s')
  const { pair: public_, client: publicClient } = pair({ keyId: null, keyTenantId: null, actingTenantId: null })
  await recheck(public_, lookups({}, {}))
  t.same(publicClient.closes, [], 'a public route’s socket has nothing to check')
  const { pair: byToken, client: tokenClient } = pair({ tokenKid: 'old' })
  const rotated = lookups({ k1: {} }, {}, ['old'])
  await recheck(byToken, rotated)
  t.same(tokenClient.closes, [[1008, 'credentials revoked']], 'a token whose signing key was withdrawn')
  t.same(rotated.asked, [], 'known from the keyring alone')
})

t.test('the sweep checks every open socket, each key and tenant once, and closes the dead ones', async (t) => {
  const sockets = new OpenSockets<SocketPair>()
  const opened = (credentials: Partial<SocketCredentials>) => {
    const made = pair(credentials)
    sockets.opened(made.pair)
    return made
  }
  const live = [opened({}), opened({})]
  const revoked = [opened({ keyId: 'k2' }), opened({ keyId: 'k2' })]
  const deactivated = opened({ keyId: 'k3', keyTenantId: 'parent', actingTenantId: 'off' })
  const withdrawn = opened({ keyId: 'k4', tokenKid: 'old' })
  const kept = opened({ keyId: 'k5', tokenKid: 'new' })
  const expiring = opened({ keyId: 'k6' })
  const source = lookups(
    { k1: {}, k2: { status: 'revoked' }, k3: {}, k4: {}, k5: {}, k6: { expiresAt: Date.now() + 30 } },
    { off: { status: 'deactivated' } },
    ['old'],
  )
  const sweep = new CredentialSweep(sockets, source, { warn: () => {} } as never)
  await sweep.sweep()
  t.same(
    live.map((s) => s.client.closes),
    [[], []],
    'sockets whose key and tenants hold stay open',
  )
  t.same(
    revoked.map((s) => s.client.closes),
    [[[1008, 'credentials revoked']], [[1008, 'credentials revoked']]],
    'every socket of a revoked key',
  )
  t.same(deactivated.client.closes, [[1008, 'tenant deactivated']], 'a socket acting as a deactivated tenant')
  t.same(withdrawn.client.closes, [[1008, 'credentials revoked']], 'a token whose signing key was withdrawn')
  t.same(kept.client.closes, [], 'a token of a published key stays')
  t.equal(source.asked.filter((a) => a === 'key k1').length, 1, 'one lookup for a key, however many sockets')
  t.equal(source.asked.filter((a) => a === 'tenant sub').length, 1, 'one lookup for a tenant')
  // Its timer is due 30 ms after the lookup said so: waited for, not slept past.
  await until(5_000, async () => expiring.client.closes.length > 0)
  t.same(expiring.client.closes, [[1008, 'credentials revoked']], 'an expiry brought nearer is armed')
})

t.test('the sweep: one timer while sockets are open, a store that fails warned once', async (t) => {
  const sockets = new OpenSockets<SocketPair>()
  const warned: unknown[] = []
  let fail = true
  const source = lookups({ k1: {} }, {})
  const flaky: CredentialSources = {
    lookups: {
      keyById: (id: string) => (fail ? Promise.reject(new Error('store down')) : source.lookups.keyById(id)),
      tenant: (id: string) => (fail ? Promise.reject(new Error('store down')) : source.lookups.tenant(id)),
    } as unknown as TenancyLookups,
    signingKeyAccepted: () => true,
  }
  const sweep = new CredentialSweep(sockets, flaky, { warn: (o: unknown) => warned.push(o) } as never, 10)
  const one = pair({})
  sockets.opened(one.pair)
  sweep.wake()
  sweep.wake()
  const waitFor = async (check: () => boolean) => {
    for (let i = 0; i < 200 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 10))
  }
  await waitFor(() => warned.length > 0)
  await new Promise((resolve) => setTimeout(resolve, 60))
  t.equal(warned.length, 1, 'the store down: warned once, not every sweep')
  t.same(one.client.closes, [], 'and the socket stays, as a known key keeps working')
  fail = false
  await waitFor(() => source.asked.length > 0)
  t.ok(source.asked.includes('key k1'), 'the store back: checked again')
  sockets.closed(one.pair)
  const before = source.asked.length
  await new Promise((resolve) => setTimeout(resolve, 60))
  t.equal(source.asked.length, before, 'no socket open: no sweep')
  const two = pair({ keyId: 'k1' })
  sockets.opened(two.pair)
  sweep.wake()
  await waitFor(() => source.asked.length > before)
  t.ok(source.asked.length > before, 'a socket opened again wakes it')
  sweep.stop()
  sweep.wake()
  const stopped = source.asked.length
  await new Promise((resolve) => setTimeout(resolve, 60))
  t.equal(source.asked.length, stopped, 'stopped: no more sweeps')
})

t.test('an invalidation checks the sockets its names concern, all of them when messages were lost', async (t) => {
  const sockets = new OpenSockets<SocketPair>()
  const one = pair({ keyId: 'k1', keyTenantId: 'sub1', actingTenantId: 'sub1' })
  const two = pair({ keyId: 'k2', keyTenantId: 'sub2', actingTenantId: 'sub2' })
  sockets.opened(one.pair)
  sockets.opened(two.pair)
  const everythingRevoked = lookups({ k1: { status: 'revoked' }, k2: { status: 'revoked' } }, {})
  const listener = revocationListener(sockets, everythingRevoked, { warn: () => {} } as never)
  listener(['key:abcd', 'anyActive:parent'])
  await new Promise((resolve) => setImmediate(resolve))
  t.same([one.client.closes, two.client.closes], [[], []], 'names of no key or tenant: nothing checked')
  listener(['keyid:k1'])
  await new Promise((resolve) => setImmediate(resolve))
  t.same([one.client.closes.length, two.client.closes.length], [1, 0], 'the key named: its socket only')
  listener(null)
  await new Promise((resolve) => setImmediate(resolve))
  t.same(two.client.closes, [[1008, 'credentials revoked']], 'messages lost: every socket checked')

  const failing = {
    lookups: { keyById: async () => Promise.reject(new Error('store down')) } as unknown as TenancyLookups,
    signingKeyAccepted: () => true,
  }
  const warned: unknown[] = []
  const three = pair({ keyId: 'k3' })
  sockets.opened(three.pair)
  revocationListener(sockets, failing, { warn: (o: unknown) => warned.push(o) } as never)(['tenant:sub'])
  await new Promise((resolve) => setImmediate(resolve))
  t.same(three.client.closes, [], 'the store down: the socket stays, as a known key keeps working')
  t.equal(warned.length, 1, 'and a warning says so')
})

t.test('expiry timers: the earlier of the key’s and the token’s, far ones looked at again', async (t) => {
  const soon = pair({ keyExpiresAt: Date.now() + 30, tokenExpiresAt: Date.now() + 5_000 })
  const token = pair({ keyExpiresAt: Date.now() + 5_000, tokenExpiresAt: Date.now() + 30 })
  const far = pair({ keyExpiresAt: Date.now() + 40 * 24 * 3600 * 1000 })
  await new Promise((resolve) => setTimeout(resolve, 80))
  t.same(soon.client.closes, [[1008, 'credentials revoked']], 'the key first')
  t.same(token.client.closes, [[1008, 'token expired']], 'the token first')
  t.same(far.client.closes, [], 'a key 40 days from expiry (past setTimeout’s bound) is not closed now')
})

t.test('a token past its exp (opened in its leeway): closed at once, without a warning', async (t) => {
  const warnings: Error[] = []
  const listen = (warning: Error) => warnings.push(warning)
  process.on('warning', listen)
  t.teardown(() => process.off('warning', listen))
  const late = pair({ tokenExpiresAt: Date.now() - 10_000 })
  await new Promise((resolve) => setTimeout(resolve, 20))
  t.same(late.client.closes, [[1008, 'token expired']])
  t.same(
    warnings.map((w) => w.name),
    [],
    'no process warning (Node 23+ warns of a negative delay)',
  )
})
