// A parent is one party for sockets too (docs/api.md, WebSockets): every socket whose key belongs
// to one parent account (the parent's own keys, and all its sub-accounts', acting as anyone) counts
// against the route's `max_websockets_per_account`, whatever its `max_websockets_per_tenant`; past
// it, an upgrade is 429 too_many_concurrent_requests. Unset, the cap is half of MAX_CONNECTIONS.
// Creating sub-accounts buys no more sockets; another parent's are its own; a closed socket frees
// its place.
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { until } from '../helpers/poll.js'
import type { TestLike } from '../helpers/test-like.js'
import { answerToUpgrade, type OpenedSocket, openSocket, startWebSocketUpstream } from '../helpers/websocket.js'

const upstream = await startWebSocketUpstream(t)
const gw = await startGateway(t, {
  gatewayConfig: {
    routes: [
      {
        prefix: '/capped',
        upstream: upstream.url,
        websocket: true,
        max_websockets_per_tenant: 3,
        max_websockets_per_account: 5,
      },
      // MAX_CONNECTIONS 20 below: 10 sockets a parent, by default.
      { prefix: '/default', upstream: upstream.url, websocket: true, max_websockets_per_tenant: 4 },
    ],
  },
  env: { MAX_CONNECTIONS: '20' },
})

/** A parent and `count` new sub-accounts of it, each with a key of its own. */
async function parentWithSubs(count: number) {
  const parent = await gw.createParent()
  const subs: { id: string; key: string }[] = []
  for (let i = 0; i < count; i++) {
    const manage = (path: string, json: unknown) =>
      callAs(gw.url, parent.apiKey, { method: 'POST', path: `/v1/sub-accounts${path}`, acting: 'self', json })
    const sub = (await manage('', { name: `sub ${i}` })).json() as { id: string }
    const key = (await manage(`/${sub.id}/api-keys`, { name: 'k', scopes: ['live:read'] })).json() as {
      api_key: string
    }
    subs.push({ id: sub.id, key: key.api_key })
  }
  return { parent, subs }
}

const open = (t: TestLike, route: string, key: string, acting?: string): Promise<OpenedSocket> =>
  openSocket(t, `${gw.url}${route}/feed`, {
    key,
    headers: acting === undefined ? {} : { 'x-service-acting-tenant': acting },
  })

/** The answer to one more upgrade: status and code. */
async function oneMore(route: string, key: string, acting?: string) {
  const answer = await answerToUpgrade(`${gw.url}${route}/feed`, {
    authorization: `Bearer ${key}`,
    ...(acting === undefined ? {} : { 'x-service-acting-tenant': acting }),
  })
  const { code } = JSON.parse(answer.body) as { code?: string }
  return { status: answer.status, code, retryAfter: answer.headers['retry-after'], body: answer.body }
}

t.test('max_websockets_per_account: the parent and its sub-accounts together, past it 429', async (t) => {
  const { parent, subs } = await parentWithSubs(4)
  const [s1, s2, s3, s4] = subs as [(typeof subs)[0], (typeof subs)[0], (typeof subs)[0], (typeof subs)[0]]
  const held = [
    await open(t, '/capped', parent.apiKey),
    await open(t, '/capped', parent.apiKey, s1.id),
    await open(t, '/capped', parent.apiKey, s2.id),
    await open(t, '/capped', s3.key),
    await open(t, '/capped', s3.key),
  ]
  t.equal(held.length, 5, 'five sockets: as itself, as two sub-accounts, by a sub-account key twice')
  const reached = upstream.upgrades.length
  for (const [what, key, acting] of [
    ['acting as a fresh sub-account', parent.apiKey, s4.id],
    ["a fresh sub-account's own key", s4.key, undefined],
    ['the parent as itself', parent.apiKey, undefined],
  ] as const) {
    const refused = await oneMore('/capped', key, acting)
    t.same(
      [refused.status, refused.code, refused.retryAfter],
      [429, 'too_many_concurrent_requests', '1'],
      `${what}: refused (${refused.body})`,
    )
  }
  t.equal(upstream.upgrades.length, reached, 'no refused upgrade reached the upstream')

  const other = await parentWithSubs(1)
  const theirs = await open(t, '/capped', other.subs[0]!.key)
  theirs.ws.send('theirs')
  t.equal(await theirs.next(), 'theirs', "another parent's sockets are its own")
  const elsewhere = await open(t, '/default', s4.key)
  elsewhere.ws.send('elsewhere')
  t.equal(await elsewhere.next(), 'elsewhere', 'another route has its own cap')

  held[0]!.ws.close()
  await held[0]!.closed
  const freed = await until(5_000, async () => {
    try {
      ;(await open(t, '/capped', s4.key)).ws.close()
      return true
    } catch {
      return false
    }
  })
  t.ok(freed, 'a closed socket frees its place for any of the account')
  // MAX_CONNECTIONS is 20: the next test needs the room.
  for (const socket of [...held, theirs, elsewhere]) socket.ws.close()
  await Promise.all([...held, theirs, elsewhere].map((socket) => socket.closed))
})

t.test('max_websockets_per_account unset: half of MAX_CONNECTIONS', async (t) => {
  const { subs } = await parentWithSubs(3)
  const sockets: OpenedSocket[] = []
  for (const sub of subs)
    for (let i = 0; i < 4 && sockets.length < 10; i++) sockets.push(await open(t, '/default', sub.key))
  t.equal(sockets.length, 10, 'ten sockets over three sub-accounts, each under its cap of 4')
  const refused = await oneMore('/default', subs[2]!.key)
  t.same(
    [refused.status, refused.code],
    [429, 'too_many_concurrent_requests'],
    `the eleventh: refused (${refused.body})`,
  )
  t.match(refused.body, /this account and its sub-accounts already have 10 WebSockets open/, 'saying why')
  for (const socket of sockets) socket.ws.close()
})
