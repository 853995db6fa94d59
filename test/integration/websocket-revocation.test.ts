// Revocation reaches open sockets (docs/api.md, WebSockets): two replicas of one deployment, with
// sockets open on both, and a change made through one of them. Revoking the key, deactivating
// the tenant a socket acts as, the key's expiry and an access token's end each close every socket
// opened with it, on both replicas, within 1 s, with 1008 and the reason. The p99 over 100
// sockets is reported.
import type { JWTPayload } from 'jose'
import t from 'tap'
import { startReplicas, type TestGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { eventually } from '../helpers/poll.js'
import { redisClient } from '../helpers/redis.js'
import { clientKey } from '../helpers/tokens.js'
import type { TestLike } from '../helpers/test-like.js'
import { type OpenedSocket, openSocket, startWebSocketUpstream } from '../helpers/websocket.js'

const upstream = await startWebSocketUpstream(t)
const [a, b] = (await startReplicas(t, 2, {
  gatewayConfig: {
    routes: [{ prefix: '/live', upstream: upstream.url, websocket: true, max_websockets_per_tenant: 500 }],
  },
  env: { ISSUER_URL: 'http://gateway.test' },
  // Each change's invalidation is sent once: the repeat a moment later would check the sockets of
  // the setup's changes again, and arm an expiry that the tests must see armed at the open.
  cacheTimings: { reinvalidateAfterMs: 60_000 },
})) as [TestGateway, TestGateway]

// A change made before both replicas listen on the bus would be lost to one of them.
const redis = redisClient(t)
const subscribed = await eventually(5_000, async () => {
  const reply = (await redis.pubsub('NUMSUB', `${a.redisKeyPrefix}invalidate`)) as [string, number | string]
  return Number(reply[1]) === 2
})
if (subscribed === null) throw new Error('the replicas did not subscribe to the invalidation channel')

const parent = await a.createParent()
const manage = (method: string, path: string, json?: unknown) =>
  callAs(a.url, parent.apiKey, { method, path: `/v1/sub-accounts${path}`, acting: 'self', ...(json ? { json } : {}) })

/** `count` sockets on each replica, opened with `key` (a key or a token), optionally acting as a tenant. */
async function socketsOnBoth(t: Assert, count: number, key: string, acting?: string): Promise<OpenedSocket[]> {
  const headers: Record<string, string> = acting === undefined ? {} : { 'x-service-acting-tenant': acting }
  return Promise.all(
    [a, b].flatMap((gw) => Array.from({ length: count }, () => openSocket(t, `${gw.url}/live/feed`, { key, headers }))),
  )
}

/** Waits for every socket to close; the ms from `since` to each close, sorted. */
async function closings(t: Assert, sockets: OpenedSocket[], since: number, reason: string): Promise<number[]> {
  const closed = await Promise.all(sockets.map((socket) => socket.closed))
  t.ok(
    closed.every((c) => c.code === 1008 && c.reason === reason),
    `every socket closed with 1008 "${reason}" (${[...new Set(closed.map((c) => `${c.code} ${c.reason}`))].join('; ')})`,
  )
  return closed.map((c) => c.at - since).sort((x, y) => x - y)
}

/** What the helpers above need of a test. */
type Assert = TestLike & Pick<typeof t, 'ok'>

const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!

t.test('a key revoked through one replica closes its 100 sockets on both within 1 s', async (t) => {
  const client = await clientKey(a.url, parent, ['orders:read'])
  const sockets = await socketsOnBoth(t, 50, client.apiKey)
  const other = await clientKey(a.url, parent, ['orders:read'])
  const bystander = await openSocket(t, `${b.url}/live/feed`, { key: other.apiKey })
  const since = performance.now()
  const revoked = await manage('POST', `/${client.subId}/api-keys/${client.keyId}/revoke`)
  t.equal(revoked.status, 200, 'revoked through A')
  const ms = await closings(t, sockets, since, 'credentials revoked')
  const p50 = percentile(ms, 50)
  const p99 = percentile(ms, 99)
  t.comment(
    `revoke to close over ${ms.length} sockets: p50 ${p50.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms, max ${ms.at(-1)!.toFixed(1)} ms`,
  )
  t.ok(ms.at(-1)! < 1000, `all closed within 1 s (p99 ${p99.toFixed(1)} ms)`)
  bystander.ws.send('still here')
  t.equal(await bystander.next(), 'still here', "another key's socket stays open")
  bystander.ws.close()
})

t.test("a tenant deactivated: the sockets acting as it close, its parent's own stay", async (t) => {
  const client = await clientKey(a.url, parent, ['orders:read'])
  const own = await socketsOnBoth(t, 5, client.apiKey)
  const acting = await socketsOnBoth(t, 5, parent.apiKey, client.subId)
  const parentsOwn = await openSocket(t, `${b.url}/live/feed`, { key: parent.apiKey })
  const since = performance.now()
  const off = await manage('POST', `/${client.subId}/deactivate`)
  t.equal(off.status, 200, 'deactivated through A')
  const ms = await closings(t, [...own, ...acting], since, 'tenant deactivated')
  t.ok(ms.at(-1)! < 1000, `all closed within 1 s (max ${ms.at(-1)!.toFixed(1)} ms)`)
  parentsOwn.ws.send('mine')
  t.equal(await parentsOwn.next(), 'mine', "the parent's socket acting as itself stays open")
  parentsOwn.ws.close()
})

t.test('a key that expires closes its sockets when it does, with no message', async (t) => {
  const sub = (await manage('POST', '', { name: 'expiring' })).json() as { id: string }
  const expiresAt = Date.now() + 2_000
  const minted = await manage('POST', `/${sub.id}/api-keys`, {
    name: 'short',
    scopes: ['orders:read'],
    expires_at: new Date(expiresAt).toISOString(),
  })
  t.equal(minted.status, 201, 'a key expiring in 2 s')
  const sockets = await socketsOnBoth(t, 3, minted.json().api_key as string)
  const ms = await closings(t, sockets, performance.now() + (expiresAt - Date.now()), 'credentials revoked')
  t.ok(ms[0]! > -50, `not before the expiry (first ${ms[0]!.toFixed(1)} ms after it)`)
  t.ok(ms.at(-1)! < 1000, `within 1 s of it (last ${ms.at(-1)!.toFixed(1)} ms)`)
})

t.test("an access token's end closes the sockets opened with it", async (t) => {
  const client = await clientKey(a.url, parent, ['orders:read'])
  // Signed 28 s ago for 30 s: its exp about 2 s from now. Its requests would still be taken for
  // the 30 s leeway after it; its sockets close at exp (docs/api.md, WebSockets).
  const now = Math.floor(Date.now() / 1000) - 28
  const claims: JWTPayload = {
    iss: 'http://gateway.test',
    aud: 'http://gateway.test',
    sub: client.keyId,
    client_id: client.keyId,
    tenant_id: client.subId,
    parent_id: parent.id,
    scope: 'orders:read',
    jti: crypto.randomUUID(),
  }
  const token = (await a.app.keyring.sign(claims, { typ: 'at+jwt', ttlSeconds: 30, now })).token
  const expiresAt = (now + 30) * 1000
  const sockets = await socketsOnBoth(t, 3, token)
  const ms = await closings(t, sockets, performance.now() + (expiresAt - Date.now()), 'token expired')
  t.ok(ms[0]! > -50, `not before the token's exp (first ${ms[0]!.toFixed(1)} ms after it)`)
  t.ok(ms.at(-1)! < 1000, `within 1 s of it (last ${ms.at(-1)!.toFixed(1)} ms)`)

  // A token's sockets also close with its key, as its requests are refused with it.
  const fresh = await socketsOnBoth(
    t,
    2,
    (await a.app.keyring.sign({ ...claims, jti: crypto.randomUUID() }, { typ: 'at+jwt', ttlSeconds: 600 })).token,
  )
  const since = performance.now()
  t.equal((await manage('POST', `/${client.subId}/api-keys/${client.keyId}/revoke`)).status, 200)
  const revoked = await closings(t, fresh, since, 'credentials revoked')
  t.ok(
    revoked.at(-1)! < 1000,
    `the key revoked: its token's sockets closed within 1 s (${revoked.at(-1)!.toFixed(1)} ms)`,
  )
})
