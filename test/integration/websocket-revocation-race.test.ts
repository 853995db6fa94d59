// No race escapes revocation (docs/api.md, WebSockets): two replicas of one deployment, and an
// upstream that holds every WebSocket handshake unanswered until the test releases it. While the
// upgrades are in flight on both replicas, the credential dies (the key revoked, its expiry
// brought forward by a roll, the tenant deactivated, the token's signing key withdrawn by
// `signing-keys rotate --compromised`); both replicas are seen refusing it over HTTP, then the
// upstream answers: each socket is closed as its upgrade completes (1008, with the reason), though
// the message that ended the credential came before the socket was registered. A rotation with
// `--compromised` also closes the sockets already open with a token it signed, on both replicas.
import t, { type Test } from 'tap'
import { cli } from '../helpers/cli.js'
import { startGateway, startReplicas, type TestGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { orTimeout, until } from '../helpers/poll.js'
import { REDIS_URL, redisClient, untilSubscribed } from '../helpers/redis.js'
import type { TestLike } from '../helpers/test-like.js'
import { accessToken, clientKey } from '../helpers/tokens.js'
import { type OpenedSocket, openSocket, startWebSocketUpstream } from '../helpers/websocket.js'

const upstream = await startWebSocketUpstream(t, { holdHandshakes: true })
const [a, b] = (await startReplicas(t, 2, {
  gatewayConfig: {
    routes: [{ prefix: '/held', upstream: upstream.url, websocket: true, max_websockets_per_tenant: 100 }],
  },
  // Each change's invalidation is sent once: its repeat a second later would reach a socket
  // registered meanwhile and hide the race (the first message came while it was opening).
  cacheTimings: { reinvalidateAfterMs: 60_000 },
})) as [TestGateway, TestGateway]
await untilSubscribed(redisClient(t), a.redisKeyPrefix!, 2)

const parent = await a.createParent()
const manage = (method: string, path: string, json?: unknown) =>
  callAs(a.url, parent.apiKey, { method, path: `/v1/sub-accounts${path}`, acting: 'self', ...(json ? { json } : {}) })

/** A socket's credential: a key or a token, maybe acting as a tenant. */
interface Credential {
  key: string
  acting?: string
}

/** Upgrades with each credential on both replicas, held by the upstream until `release`. */
async function upgradesInFlight(t: TestLike, credentials: Credential[]): Promise<Promise<OpenedSocket>[]> {
  const before = upstream.held()
  const opening = credentials.flatMap(({ key, acting }) =>
    [a, b].map((gw) =>
      openSocket(t, `${gw.url}/held/feed`, {
        key,
        headers: acting === undefined ? {} : { 'x-service-acting-tenant': acting },
      }),
    ),
  )
  const held = await until(10_000, async () => upstream.held() === before + opening.length)
  if (!held) throw new Error(`the upstream holds ${upstream.held() - before} of ${opening.length} upgrades`)
  return opening
}

/** Both replicas refuse the credential over HTTP: the change has reached them. */
async function refusedOnBoth(credentials: Credential[]): Promise<boolean> {
  return until(10_000, async () => {
    for (const gw of [a, b])
      for (const { key, acting } of credentials) {
        const status = (await callAs(gw.url, key, { path: '/held/x', ...(acting ? { acting } : {}) })).status
        // The upstream answers a plain request 426: the credential still passes.
        if (status === 426) return false
      }
    return true
  })
}

/**
 * The upstream answers the held upgrades; each socket must open and then close with 1008 and
 * `reason`. The wait is bounded generously (5 s) for a loaded machine; the time from its opening to
 * its close is reported.
 */
async function releaseAndExpectClosed(t: Test, opening: Promise<OpenedSocket>[], reason: string): Promise<void> {
  upstream.release()
  const sockets = await Promise.all(opening)
  const openedAt = performance.now()
  const closed = await Promise.all(sockets.map((socket) => orTimeout(socket.closed, 5_000, null)))
  const open = closed.filter((c) => c === null).length
  t.equal(open, 0, `every socket closed after its upgrade completed (${open} of ${closed.length} still open)`)
  const endings = [...new Set(closed.map((c) => (c === null ? 'open' : `${c.code} ${c.reason}`)))]
  t.same(endings, [`1008 ${reason}`], `with 1008 "${reason}"`)
  const ms = closed.filter((c) => c !== null).map((c) => c.at - openedAt)
  if (ms.length > 0) t.comment(`open to close: max ${Math.max(...ms).toFixed(1)} ms over ${ms.length} sockets`)
}

t.test('a key revoked while its upgrades are in flight: their sockets close as they open', async (t) => {
  const client = await clientKey(a.url, parent, ['orders:read'])
  const opening = await upgradesInFlight(t, [{ key: client.apiKey }, { key: client.apiKey }])
  t.equal((await manage('POST', `/${client.subId}/api-keys/${client.keyId}/revoke`)).status, 200, 'revoked')
  t.ok(await refusedOnBoth([{ key: client.apiKey }]), 'both replicas refuse the key over HTTP')
  await releaseAndExpectClosed(t, opening, 'credentials revoked')
})

t.test("a key's expiry brought forward by a roll while its upgrades are in flight", async (t) => {
  const client = await clientKey(a.url, parent, ['orders:read'])
  const opening = await upgradesInFlight(t, [{ key: client.apiKey }])
  const rolled = await manage('POST', `/${client.subId}/api-keys/${client.keyId}/roll`, { expires_in_seconds: 1 })
  t.equal(rolled.status, 201, `rolled, the old key to expire in 1 s (${rolled.body})`)
  t.ok(await refusedOnBoth([{ key: client.apiKey }]), 'both replicas refuse the expired key over HTTP')
  await releaseAndExpectClosed(t, opening, 'credentials revoked')
})

t.test('a tenant deactivated while upgrades acting as it are in flight', async (t) => {
  const client = await clientKey(a.url, parent, ['orders:read'])
  const credentials = [{ key: client.apiKey }, { key: parent.apiKey, acting: client.subId }]
  const opening = await upgradesInFlight(t, credentials)
  t.equal((await manage('POST', `/${client.subId}/deactivate`)).status, 200, 'deactivated')
  t.ok(await refusedOnBoth(credentials), 'both replicas refuse its key, and acting as it, over HTTP')
  await releaseAndExpectClosed(t, opening, 'tenant deactivated')
  const own = await upgradesInFlight(t, [{ key: parent.apiKey }])
  upstream.release()
  const [mine] = await Promise.all(own)
  mine!.ws.send('mine')
  t.equal(await mine!.next(), 'mine', "the parent's own socket opens and stays")
  mine!.ws.close()
})

t.test('a replica that missed the message closes the socket by its own check, within its cache TTL', async (t) => {
  // C shares the database but not the bus (another prefix): every message is lost to it. Its
  // entries live 1 s in process and in Redis; then its check each second reads the revocation.
  const c = await startGateway(t, {
    gatewayConfig: {
      routes: [{ prefix: '/held', upstream: upstream.url, websocket: true, max_websockets_per_tenant: 100 }],
    },
    database: a.database,
    cacheTimings: { localTtlMs: 1_000, redisTtlMs: 1_000 },
  })
  const client = await clientKey(a.url, parent, ['orders:read'])
  const before = upstream.held()
  const opening = openSocket(t, `${c.url}/held/feed`, { key: client.apiKey })
  t.ok(await until(10_000, async () => upstream.held() === before + 1), 'the upgrade reached the upstream')
  upstream.release()
  const socket = await opening
  socket.ws.send('hello')
  t.equal(await socket.next(), 'hello', 'open on C')
  t.equal((await manage('POST', `/${client.subId}/api-keys/${client.keyId}/revoke`)).status, 200, 'revoked through A')
  const refused = await until(
    10_000,
    async () => (await callAs(c.url, client.apiKey, { path: '/held/x' })).status === 401,
  )
  t.ok(refused, 'C refuses the key over HTTP once its entries expired')
  const closed = await orTimeout(socket.closed, 5_000, null)
  t.same(
    closed === null ? 'open' : `${closed.code} ${closed.reason}`,
    '1008 credentials revoked',
    'and closes its socket',
  )
})

t.test(
  'rotate --compromised: open sockets with its tokens close on both replicas, in-flight ones as they open',
  async (t) => {
    const client = await clientKey(a.url, parent, ['orders:read'])
    const token = await accessToken(a.url, client)
    const openNow = await upgradesInFlight(t, [{ key: token }])
    upstream.release()
    const open = await Promise.all(openNow)
    const byKey = await upgradesInFlight(t, [{ key: client.apiKey }])
    upstream.release()
    const keySockets = await Promise.all(byKey)
    const opening = await upgradesInFlight(t, [{ key: token }])

    const operator = cli({ DATABASE_URL: a.database.url, REDIS_URL, REDIS_KEY_PREFIX: a.redisKeyPrefix! })
    await operator.ok(t, ['signing-keys', 'rotate', '--compromised'])
    const closed = await Promise.all(open.map((socket) => orTimeout(socket.closed, 5_000, null)))
    t.same(
      closed.map((c) => (c === null ? 'open' : `${c.code} ${c.reason}`)),
      ['1008 credentials revoked', '1008 credentials revoked'],
      'the sockets open with its token close on both replicas',
    )
    t.ok(await refusedOnBoth([{ key: token }]), 'both replicas refuse the token over HTTP')
    await releaseAndExpectClosed(t, opening, 'credentials revoked')
    for (const socket of keySockets) {
      socket.ws.send('still')
      t.equal(await socket.next(), 'still', "the key's own sockets stay: only its token was withdrawn")
      socket.ws.close()
    }
  },
)
