// What the gateway records and rewrites (docs/api.md: "What comes back", IP allow-lists, Headers),
// over real sockets against a real upstream: a Location moved only when it names the upstream, no
// gateway cookie set by an upstream, a client address that is always an address (request log,
// events, allow-lists) with the hop that reached the gateway appended for the upstream, and a
// request id that is never a credential, on proxied and management routes alike.
import t from 'tap'
import { request } from 'undici'
import { generate } from '../../src/auth/key-format.js'
import { eventsOf } from '../helpers/events.js'
import { startGateway } from '../helpers/gateway.js'
import { rawRequest, type RawResponse } from '../helpers/http.js'
import type { JsonBody } from '../helpers/json.js'
import { until } from '../helpers/poll.js'
import { startUpstream } from '../helpers/upstream.js'
import { openSocket, startWebSocketUpstream } from '../helpers/websocket.js'

/** A JSON list in a query parameter: what the upstream is to answer with. */
const listParam = (values: readonly string[]) => encodeURIComponent(JSON.stringify(values))

// `?to=[…]`: a 302 with those Locations; `?cookies=[…]`: a 200 with those Set-Cookies; else echo.
const upstream = await startUpstream(t, (req, response, received) => {
  const query = new URL(req.url!, 'http://upstream').searchParams
  const to = query.get('to')
  const cookies = query.get('cookies')
  if (to !== null) response.setHeader('location', JSON.parse(to) as string[])
  if (cookies !== null) response.setHeader('set-cookie', JSON.parse(cookies) as string[])
  if (to !== null || cookies !== null) {
    response.writeHead(to === null ? 200 : 302, { 'content-length': '0' })
    response.end()
    return
  }
  response.writeHead(200, { 'content-type': 'application/json' })
  response.end(JSON.stringify(received))
})
const origin = upstream.url
const sockets = await startWebSocketUpstream(t)

const gw = await startGateway(t, {
  env: { TRUSTED_PROXIES: '127.0.0.1' },
  requestLog: { flushIntervalMs: 50 },
  gatewayConfig: {
    routes: [
      // The upstream sees /internal/v1/…: its Locations there are the client's /v1/….
      { prefix: '/v1', upstream: `${origin}/internal`, public: true },
      { prefix: '/api', upstream: origin, scopes: { read: ['api:read'], write: ['api:write'] } },
      { prefix: '/live', upstream: sockets.url, websocket: true },
      { prefix: '/', upstream: `${origin}/root`, public: true },
    ],
  },
})
const parent = await gw.createParent({ scopes: ['sub_accounts:read', 'sub_accounts:write', 'api:read'] })

/** A GET through the gateway, every repeated header of the answer as the client got it. */
async function answerOf(path: string, headers: Record<string, string> = {}) {
  const answer = await request(`${gw.url}${path}`, { headers })
  await answer.body.dump()
  return { status: answer.statusCode, headers: answer.headers }
}

t.test('a Location is moved under the route only when it names the upstream', async (t) => {
  const moved: [string, string, string][] = [
    ['/v1/go', '/internal/v1/x', '/v1/x'],
    ['/v1/go', '/internal/v1', '/v1'],
    ['/v1/go', '/internal/v1?q=1', '/v1?q=1'],
    ['/v1/go', `${origin}/internal/v1/x?y=2`, '/v1/x?y=2'],
    ['/v1/go', `${origin.toUpperCase()}/internal/v1/x`, '/v1/x'],
    ['/go', '/root/x', '/x'],
    ['/go', `${origin}/root`, '/'],
    ['/api/go', `${origin}/api/x`, '/api/x'],
  ]
  const unchanged: [string, string][] = [
    ['/v1/go', '/internal/v1ment'],
    ['/v1/go', '/other/internal/v1/x'],
    ['/v1/go', '/internal/v1/../../admin'],
    ['/v1/go', '//evil.example/internal/v1/x'],
    ['/v1/go', '/\\evil.example/internal/v1/x'],
    ['/v1/go', 'http://evil.example/internal/v1/x'],
    ['/v1/go', `${origin.replace('http:', 'https:')}/internal/v1/x`],
    ['/v1/go', `http://user@${origin.slice(7)}/internal/v1/x`],
    ['/v1/go', '../v1/x'],
    ['/go', '/rootkit'],
    ['/go', '//evil.example/root/x'],
    ['/api/go', '/api/x'],
  ]
  const auth = { authorization: `Bearer ${parent.apiKey}` }
  for (const [path, location, expected] of moved) {
    const answer = await answerOf(`${path}?to=${listParam([location])}`, path.startsWith('/api') ? auth : {})
    t.equal(answer.status, 302, `${location}: passed on`)
    t.equal(answer.headers.location, expected, `${location} becomes ${expected}`)
  }
  for (const [path, location] of unchanged) {
    const answer = await answerOf(`${path}?to=${listParam([location])}`, path.startsWith('/api') ? auth : {})
    t.equal(answer.headers.location, location, `${location}: passes as sent`)
  }
  const twice = await answerOf(`/v1/go?to=${listParam(['/internal/v1/a', '/internal/v1ment'])}`)
  t.equal(twice.status, 302)
  t.same(twice.headers.location, ['/v1/a', '/internal/v1ment'], 'each of two Locations judged alone')
})

t.test("an upstream cannot set the gateway's cookies, whatever their spelling or attributes", async (t) => {
  const gateways = [
    'tgw_portal=tgwps_forged; Path=/portal/; HttpOnly; SameSite=Strict',
    'tgw_portal=x; Domain=127.0.0.1; Path=/',
    'TGW_PORTAL=x; Path=/',
    'Tgw_Other=x',
    '\ttgw_portal=x',
    'tgw_portal',
    '=tgw_portal=x',
    '__Host-tgw_portal=x; Secure; Path=/',
    '__secure-TGW_portal=x; Secure',
    'a=1, tgw_portal=x',
    'xtgw_portal=1',
    'c=tgw_portal',
  ]
  const others = ['a=1', 'b=2; Path=/; HttpOnly', 'tgw=1', 'tgw-portal=1', 'tgwportal=1']
  const mixed = await answerOf(`/v1/c?cookies=${listParam([...gateways, ...others])}`)
  t.equal(mixed.status, 200)
  t.same(mixed.headers['set-cookie'], others, "the others pass, in order; none of the gateway's")
  for (const cookie of gateways) {
    const alone = await answerOf(`/v1/c?cookies=${listParam([cookie])}`)
    t.equal(alone.headers['set-cookie'], undefined, `${JSON.stringify(cookie)} alone: no Set-Cookie at all`)
  }
  const keyed = await answerOf(`/api/c?cookies=${listParam(['tgw_portal=x', 'a=1'])}`, {
    authorization: `Bearer ${parent.apiKey}`,
  })
  t.equal(keyed.headers['set-cookie'], 'a=1', 'a keyed route too')
  const withLocation = await answerOf(`/go?to=${listParam(['/root/x'])}&cookies=${listParam(['tgw_portal=x'])}`)
  t.same([withLocation.headers.location, withLocation.headers['set-cookie']], ['/x', undefined], 'both rules at once')
})

/** A request from `localAddress` (127.0.0.1, the trusted proxy, by default) with these X-Forwarded-For lines. */
function fromProxy(
  path: string,
  forwardedFor: string[],
  options: { method?: string; json?: unknown; key?: string; localAddress?: string } = {},
): Promise<RawResponse> {
  const headers: [string, string][] = [['Authorization', `Bearer ${options.key ?? parent.apiKey}`]]
  // A parent with sub-accounts names whom a write acts as.
  if (options.key === undefined) headers.push(['X-Service-Acting-Tenant', 'self'])
  for (const line of forwardedFor) headers.push(['X-Forwarded-For', line])
  if (options.json !== undefined) headers.push(['Content-Type', 'application/json'])
  return rawRequest(gw.url, {
    method: options.method ?? 'GET',
    path,
    headers,
    body: options.json === undefined ? undefined : JSON.stringify(options.json),
    localAddress: options.localAddress,
  })
}

/** The parent's request-log record with this id, once written. */
async function recordOf(id: string): Promise<JsonBody> {
  let found: JsonBody | null = null
  await until(10_000, async () => {
    const res = await rawRequest(gw.url, {
      path: `/v1/sub-accounts/requests/${id}`,
      headers: [['Authorization', `Bearer ${parent.apiKey}`]],
    })
    if (res.status === 200) found = res.json()
    return found !== null
  })
  if (found === null) throw new Error(`no record of ${id}`)
  return found
}

const idOf = (res: RawResponse) => res.headers['x-request-id'] as string

t.test('behind a trusted proxy: source_ip is an address, the upstream gets the hop appended once', async (t) => {
  // [X-Forwarded-For lines, the client address, what the upstream gets]
  const cases: [string[], string, string][] = [
    [[], '127.0.0.1', '127.0.0.1'],
    [['203.0.113.9'], '203.0.113.9', '203.0.113.9, 127.0.0.1'],
    [['198.51.100.1, 203.0.113.9'], '203.0.113.9', '198.51.100.1, 203.0.113.9, 127.0.0.1'],
    [['2001:db8::7'], '2001:db8::7', '2001:db8::7, 127.0.0.1'],
    [['<script>alert(1)</script>'], '127.0.0.1', '127.0.0.1'],
    [['<script>, 203.0.113.9'], '203.0.113.9', '203.0.113.9, 127.0.0.1'],
    [['203.0.113.9, <script>'], '203.0.113.9', '203.0.113.9, 127.0.0.1'],
    [['203.0.113.9 , unknown , 127.0.0.1'], '203.0.113.9', '203.0.113.9, 127.0.0.1, 127.0.0.1'],
    [['unknown'], '127.0.0.1', '127.0.0.1'],
    [['203.0.113.9:4711'], '127.0.0.1', '127.0.0.1'],
    [['[2001:db8::7]'], '127.0.0.1', '127.0.0.1'],
    [['fe80::1%eth0'], '127.0.0.1', '127.0.0.1'],
    [['1'], '127.0.0.1', '127.0.0.1'],
    [['0x7f.0.0.1'], '127.0.0.1', '127.0.0.1'],
    [['<script>', '203.0.113.9'], '203.0.113.9', '203.0.113.9, 127.0.0.1'],
    [['203.0.113.9', '<script>'], '203.0.113.9', '203.0.113.9, 127.0.0.1'],
  ]
  for (const [forwardedFor, client, upstreamGets] of cases) {
    const what = JSON.stringify(forwardedFor)
    const res = await fromProxy('/api/who', forwardedFor)
    t.equal(res.status, 200, `${what}: answered`)
    t.equal(res.json().headers['x-forwarded-for'], upstreamGets, `${what}: the upstream's X-Forwarded-For`)
    t.equal((await recordOf(idOf(res))).source_ip, client, `${what}: the record's source_ip`)
  }
  // A WebSocket upgrade's headers are built by the same rules.
  const marker = `ws-${Date.now()}`
  const socket = await openSocket(t, `${gw.url}/live`, {
    key: parent.apiKey,
    headers: { 'x-forwarded-for': '203.0.113.9, <script>', 'x-test-marker': marker },
  })
  const upgradeOf = () => sockets.upgrades.find((headers) => headers['x-test-marker'] === marker)
  t.ok(await until(5_000, async () => upgradeOf() !== undefined), 'the upstream took the upgrade')
  t.equal(upgradeOf()?.['x-forwarded-for'], '203.0.113.9, 127.0.0.1', "a WebSocket upstream's too")
  // Its answer is the upgrade, whole, though fastify's response never finishes.
  const upgrade = await recordOf(upgradeOf()!['x-request-id'] as string)
  t.match(upgrade, { status: 101, outcome: 'completed' }, "the upgrade's record: it ended whole")
  socket.ws.close()
  // From a peer that is not a trusted proxy, the chain is the client's say: it counts for nothing.
  const direct = await fromProxy('/api/who', ['203.0.113.9'], { localAddress: '127.0.0.2' })
  t.equal(direct.json().headers['x-forwarded-for'], '203.0.113.9, 127.0.0.2')
  t.equal((await recordOf(idOf(direct))).source_ip, '127.0.0.2')
})

t.test('management calls and their events record an address too', async (t) => {
  const listed = await fromProxy('/v1/sub-accounts', ['<script>alert(1)</script>'])
  t.equal(listed.status, 200)
  t.equal((await recordOf(idOf(listed))).source_ip, '127.0.0.1', "a management call's record")
  for (const [forwardedFor, client] of [
    [['<img src=x>'], '127.0.0.1'],
    [['203.0.113.9, not-an-ip'], '203.0.113.9'],
  ] as const) {
    const created = await fromProxy('/v1/sub-accounts', [...forwardedFor], {
      method: 'POST',
      json: { name: `behind ${client}` },
    })
    t.equal(created.status, 201, created.body)
    const events = await eventsOf(gw.sql, parent.id)
    const event = events.find((e) => e.request_id === idOf(created))
    t.equal(event?.source_ip, client, `${JSON.stringify(forwardedFor)}: the event's source_ip`)
  }
})

t.test('IP allow-lists read the same address', async (t) => {
  const made = await fromProxy('/v1/sub-accounts', [], { method: 'POST', json: { name: 'walled' } })
  t.equal(made.status, 201, made.body)
  const sub = made.json()
  const minted = await fromProxy(`/v1/sub-accounts/${sub.id}/api-keys`, [], {
    method: 'POST',
    json: { name: 'k', scopes: ['api:read'], ip_allowlist: ['203.0.113.0/24'] },
  })
  t.equal(minted.status, 201)
  const key = minted.json().api_key as string
  t.equal((await fromProxy('/api/x', ['203.0.113.9, <script>'], { key })).status, 200, 'junk right of the client')
  const refused = await fromProxy('/api/x', ['<script>'], { key })
  t.equal(refused.status, 403)
  t.match(refused.json().detail, /^requests from 127\.0\.0\.1 may not use this key/, 'the refusal names an address')
})

t.test('a request id is never a credential: the gateway makes one instead', async (t) => {
  const jwt = `${Buffer.from('{"alg":"ES256"}').toString('base64url')}.${Buffer.from('{"sub":"x"}').toString('base64url')}.c2ln`
  const refused: [string, string][] = [
    [parent.apiKey, 'the caller’s own API key'],
    [parent.apiKey.toUpperCase(), 'a key in capitals'],
    [generate('tgws_'), 'a client secret'],
    [generate('tgwps_'), 'a portal session'],
    [generate('tgwpl_'), 'a portal link'],
    [`key:${parent.apiKey}`, 'a key after a separator'],
    [jwt, 'a JWT'],
    [jwt.split('.')[0]!, "a JWT's header"],
    ['abc.def.ghi', 'three base64url parts'],
  ]
  const made = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
  const send = (path: string, id: string) =>
    rawRequest(gw.url, {
      path,
      headers: [
        ['Authorization', `Bearer ${parent.apiKey}`],
        ['X-Request-Id', id],
      ],
    })
  for (const [path, route] of [
    ['/api/id', 'a proxied route'],
    ['/v1/sub-accounts', 'a management route'],
  ] as const) {
    for (const [id, what] of refused) {
      const res = await send(path, id)
      t.equal(res.status, 200, `${route}, ${what}: answered`)
      t.match(idOf(res), made, `${route}, ${what}: an id of the gateway's`)
      if (path === '/api/id')
        t.equal(res.json().headers['x-request-id'], idOf(res), `${what}: the upstream's is it too`)
      const record = await recordOf(idOf(res))
      t.not(record.id, id, `${route}, ${what}: not recorded under it`)
    }
    const own = `req-${route.length}-${Date.now()}`
    const kept = await send(path, own)
    t.equal(idOf(kept), own, `${route}: a sane id is kept`)
    t.equal((await recordOf(own)).id, own)
  }
  // Nothing was recorded under any of them.
  for (const [id, what] of refused) {
    const res = await rawRequest(gw.url, {
      path: `/v1/sub-accounts/requests/${encodeURIComponent(id)}`,
      headers: [['Authorization', `Bearer ${parent.apiKey}`]],
    })
    t.equal(res.status, 404, `no record under ${what}`)
  }
})
