// Cells (docs/api.md, Cells) over two replicas of one deployment (one Postgres database, one Redis
// prefix), each on its own socket, in front of real upstreams on loopback, one or two a cell: a
// tenant's requests reach its cell's targets only (each upstream's own record says so), with the
// gateway's X-Service-Cell and never a client's; a cell the route lacks is 421; a placement the
// parent may not use is 400 naming its cells, nothing written; a PATCH on A moves the tenant on B
// within 1 s and closes its WebSockets on the old cell with 1012; the request log and the event
// carry the cell.
import t, { type Test } from 'tap'
import { cli } from '../helpers/cli.js'
import { TEST_ENCRYPTION_KEY } from '../helpers/encryption-key.js'
import { eventsOf } from '../helpers/events.js'
import { metricValue, type GatewayOptions, startReplicas, type TestGateway } from '../helpers/gateway.js'
import { callAs, type RawResponse } from '../helpers/http.js'
import type { JsonBody } from '../helpers/json.js'
import { eventually, orTimeout, until } from '../helpers/poll.js'
import { REDIS_URL } from '../helpers/redis.js'
import { REFUSED_URL, type ReceivedRequest, startUpstream, type Upstream } from '../helpers/upstream.js'
import { openSocket, startWebSocketUpstream } from '../helpers/websocket.js'

// B keeps records in-process for a minute, and A's second send of each invalidation is put off by
// a minute: only the one message of the change under test can move B within the second allowed.
const SLOW_LOCAL_EXPIRY: GatewayOptions['cacheTimings'] = {
  localTtlMs: 60_000,
  negativeTtlMs: 60_000,
  reinvalidateAfterMs: 60_000,
}

const euA = await startUpstream(t)
const euB = await startUpstream(t)
const us = await startUpstream(t)
const own = await startUpstream(t)
const usOnly = await startUpstream(t)
const wsEu = await startWebSocketUpstream(t)
const wsUs = await startWebSocketUpstream(t)
const usLive = await startUpstream(t)
const all: Record<string, Upstream> = { euA, euB, us, own, usOnly, usLive }

const [a, b] = (await startReplicas(t, 2, {
  cacheTimings: SLOW_LOCAL_EXPIRY,
  requestLog: { flushIntervalMs: 50 },
  gatewayConfig: {
    routes: [
      {
        prefix: '/api',
        cells: {
          eu: { targets: [{ url: euA.url }, { url: euB.url }], balance: 'round_robin' },
          us: { targets: [{ url: us.url }] },
        },
        default_cell: 'eu',
      },
      // Its own upstream serves a tenant placed nowhere; it has no eu.
      { prefix: '/solo', upstream: own.url, cells: { us: { targets: [{ url: usOnly.url }] } } },
      // Every eu target down: eu's requests fail, and never go to us.
      {
        prefix: '/down',
        cells: {
          eu: { targets: [{ url: REFUSED_URL }], outlier: { eject_after: 1, max_ejected_percent: 100 } },
          us: { targets: [{ url: usLive.url }] },
        },
        default_cell: 'eu',
      },
      {
        prefix: '/live',
        websocket: true,
        cells: { eu: { targets: [{ url: wsEu.url }] }, us: { targets: [{ url: wsUs.url }] } },
        default_cell: 'eu',
      },
    ],
  },
})) as [TestGateway, TestGateway]
const sql = a.database.sql
const operator = cli({
  DATABASE_URL: a.database.url,
  ENCRYPTION_KEY: TEST_ENCRYPTION_KEY,
  REDIS_URL,
  REDIS_KEY_PREFIX: a.redisKeyPrefix!,
})

const manage = (gw: TestGateway, key: string, method: string, path: string, json?: unknown) =>
  callAs(gw.url, key, { method, path: `/v1/sub-accounts${path}`, acting: 'self', json })

async function created(t: Test, key: string, body: JsonBody): Promise<JsonBody> {
  const res = await manage(a, key, 'POST', '', body)
  t.equal(res.status, 201, `created: ${res.body}`)
  return res.json()
}

/** Where each upstream is in its record, to tell what one request added. */
const counts = () => Object.fromEntries(Object.entries(all).map(([name, u]) => [name, u.received.length]))

/** The upstreams that got something since `before`, with what they got. */
function since(before: Record<string, number>): Record<string, ReceivedRequest[]> {
  const got: Record<string, ReceivedRequest[]> = {}
  for (const [name, u] of Object.entries(all))
    if (u.received.length > before[name]!) got[name] = u.received.slice(before[name])
  return got
}

const get = (gw: TestGateway, key: string, path: string, acting?: string, headers: [string, string][] = []) =>
  callAs(gw.url, key, { path, headers, ...(acting === undefined ? {} : { acting }) })

t.test('accounts placement: the cells a parent may use and its default; a bad value changes nothing', async (t) => {
  const parent = await a.createParent()
  const fails = [
    [['--cells', 'eu,US'], /"US" is not a cell name/],
    [['--cells', 'eu,us', '--default', 'asia'], /--default must be one of --cells \(eu, us\)/],
    [['--default', 'eu'], /give --cells/],
    [['--cells', 'eu', '--none'], /not both/],
  ] as const
  for (const [args, message] of fails)
    await operator.fails(t, ['accounts', 'placement', '--account', parent.id, ...args], message)
  const [row] = await sql`select allowed_cells, placement from tenants where id = ${parent.id}`
  t.same(row, { allowed_cells: null, placement: null }, 'nothing was written')
  await operator.fails(
    t,
    ['accounts', 'placement', '--account', crypto.randomUUID(), '--cells', 'eu'],
    /no parent account/,
  )

  const out = await operator.ok(t, [
    'accounts',
    'placement',
    '--account',
    parent.id,
    '--cells',
    'eu,us',
    '--default',
    'us',
  ])
  t.same([out.account.cells, out.account.default_cell], [['eu', 'us'], 'us'])
  const cleared = await operator.ok(t, ['accounts', 'placement', '--account', parent.id, '--none'])
  t.same([cleared.account.cells, cleared.account.default_cell], [null, null])
  await operator.ok(t, ['accounts', 'placement', '--account', parent.id, '--none'])
  const events = (await eventsOf(sql, parent.id)).filter((e) => e.type === 'account.placement_updated')
  t.match(events, [
    {
      actor: { type: 'operator' },
      target: { type: 'account', id: parent.id },
      data: { object: { cells: ['eu', 'us'], default_cell: 'us' }, previous: { cells: null, default_cell: null } },
    },
    { data: { object: { cells: null, default_cell: null }, previous: { cells: ['eu', 'us'], default_cell: 'us' } } },
  ])
  t.equal(events.length, 2, 'each change an event; the repeat none')
})

t.test('a placement the parent may not use is 400 naming its cells, and nothing is written', async (t) => {
  const parent = await a.createParent()
  const none = await manage(a, parent.apiKey, 'POST', '', { name: 'early', placement: 'eu' })
  t.equal(none.status, 400)
  t.match(none.json(), { code: 'validation_failed', errors: [{ path: '/body/placement', message: /no cell/ }] })

  await operator.ok(t, ['accounts', 'placement', '--account', parent.id, '--cells', 'eu,us'])
  const sub = await created(t, parent.apiKey, { name: 'placed', placement: 'us' })
  t.equal(sub.placement, 'us', 'placement is in the answer')
  const plain = await created(t, parent.apiKey, { name: 'plain' })
  t.equal(plain.placement, null, 'null when none is given')

  const eventsBefore = (await eventsOf(sql, parent.id)).length
  for (const bad of ['asia', 'EU', '', 'eu '] as const) {
    const create = await manage(a, parent.apiKey, 'POST', '', { name: `bad ${bad}`, placement: bad })
    t.equal(create.status, 400, `create with ${JSON.stringify(bad)}`)
    t.match(create.json(), {
      code: 'validation_failed',
      errors: [{ path: '/body/placement', message: 'must be one of the cells this account may use (eu, us), or null' }],
    })
    const patch = await manage(a, parent.apiKey, 'PATCH', `/${sub.id}`, { placement: bad, name: 'renamed' })
    t.equal(patch.status, 400, `PATCH with ${JSON.stringify(bad)}`)
    t.match(patch.json().detail, /eu, us/)
  }
  const [count] = await sql`select count(*)::int as n from tenants where parent_id = ${parent.id}`
  t.equal(count!.n, 2, 'no sub-account was created')
  const [row] = await sql`select name, placement from tenants where id = ${sub.id}`
  t.same(row, { name: 'placed', placement: 'us' }, 'the PATCH wrote nothing, its other fields neither')
  t.equal((await eventsOf(sql, parent.id)).length, eventsBefore, 'no event either')

  const shown = await manage(a, parent.apiKey, 'GET', `/${sub.id}`)
  t.equal(shown.json().placement, 'us', 'GET shows it')
  const listed = await manage(a, parent.apiKey, 'GET', '?limit=10')
  t.same(
    listed.json().data.map((s: JsonBody) => s.placement),
    ['us', null],
    'the list shows it',
  )
})

t.test("a tenant's requests reach its cell's targets only, with the gateway's X-Service-Cell", async (t) => {
  const parent = await a.createParent()
  await operator.ok(t, ['accounts', 'placement', '--account', parent.id, '--cells', 'eu,us'])
  const inUs = await created(t, parent.apiKey, { name: 'in us', placement: 'us' })
  const nowhere = await created(t, parent.apiKey, { name: 'nowhere' })

  // Every spelling a client could forge, each of which must be dropped.
  const forged: [string, string][] = [
    ['X-Service-Cell', 'eu'],
    ['x-service-cell', 'eu'],
    ['X-SERVICE-CELL', 'eu'],
    ['X_Service_Cell', 'eu'],
    ['x.service.cell', 'eu'],
    ['Connection', 'X-Service-Cell'],
  ]
  for (const gw of [a, b]) {
    const before = counts()
    for (let i = 0; i < 4; i++) t.equal((await get(gw, parent.apiKey, '/api/x', inUs.id, forged)).status, 200)
    const got = since(before)
    t.same(Object.keys(got), ['us'], 'only the us target got them')
    for (const request of got.us!) {
      t.equal(request.headers['x-service-cell'], 'us', 'X-Service-Cell is the tenant cell')
      const names = request.rawHeaders.filter((_, i) => i % 2 === 0).map((n) => n.toLowerCase().replace(/[_.]/g, '-'))
      t.equal(names.filter((n) => n === 'x-service-cell').length, 1, 'once, the forged ones dropped')
    }
  }

  // Placed nowhere, the parent has no default: the route's default_cell, over both eu targets.
  const before = counts()
  for (let i = 0; i < 4; i++) t.equal((await get(b, parent.apiKey, '/api/x', nowhere.id)).status, 200)
  const got = since(before)
  t.same(Object.keys(got).sort(), ['euA', 'euB'], "the route's default cell, balanced over its targets")
  t.ok([...got.euA!, ...got.euB!].every((r) => r.headers['x-service-cell'] === 'eu'))

  // The parent's default moves its sub-accounts placed nowhere (and itself), not the placed one.
  await operator.ok(t, ['accounts', 'placement', '--account', parent.id, '--cells', 'eu,us', '--default', 'us'])
  const moved = await eventually(5_000, async () => {
    const res = await get(b, parent.apiKey, '/api/x', nowhere.id)
    return res.status === 200 && res.json().headers['x-service-cell'] === 'us'
  })
  t.not(moved, null, "the parent's default reaches B")
  const self = await get(b, parent.apiKey, '/api/x', 'self')
  t.equal(self.json().headers['x-service-cell'], 'us', 'the parent acting as itself: its default')
  // The sub-account's own key: its parent's record is read through the caches.
  const minted = await manage(a, parent.apiKey, 'POST', `/${nowhere.id}/api-keys`, {
    name: 'own',
    scopes: ['orders:read'],
  })
  t.equal(minted.status, 201, minted.body)
  const own = await get(b, minted.json().api_key, '/api/x')
  t.equal(own.json().headers['x-service-cell'], 'us', "its own key: its parent's default too")
  t.equal(own.json().headers['x-service-resolved-tenant'], nowhere.id)

  t.equal(await metricValue(b.app, 'tgw_upstream_target_up', { route: '/api', cell: 'eu', target: euB.url }), 1)
  t.equal(await metricValue(b.app, 'tgw_upstream_target_up', { route: '/api', cell: 'us', target: us.url }), 1)
  const ejections = await b.app.metrics.registry.getSingleMetric('tgw_upstream_ejections_total')!.get()
  t.ok(
    ejections.values.some((v) => v.labels.route === '/api' && v.labels.target === us.url),
    "a cell's target's ejections start at 0",
  )
})

t.test('a route with no targets for the cell is 421 cell_not_served, and sends nothing', async (t) => {
  const parent = await a.createParent()
  await operator.ok(t, ['accounts', 'placement', '--account', parent.id, '--cells', 'eu,us'])
  const inEu = await created(t, parent.apiKey, { name: 'in eu', placement: 'eu' })
  const nowhere = await created(t, parent.apiKey, { name: 'nowhere' })
  const before = counts()
  const res = await get(a, parent.apiKey, '/solo/x', inEu.id)
  t.equal(res.status, 421)
  t.match(res.headers['content-type'], /^application\/problem\+json/)
  t.match(res.json(), { code: 'cell_not_served', status: 421, cell: 'eu', route: '/solo', detail: /eu/ })
  t.same(since(before), {}, 'no upstream got it')

  const plain = await get(a, parent.apiKey, '/solo/x', nowhere.id)
  t.equal(plain.status, 200, "placed nowhere: the route's own upstream")
  t.same(Object.keys(since(before)), ['own'])
  t.equal(plain.json().headers['x-service-cell'], undefined, 'and no X-Service-Cell')
})

t.test('a cell whose targets are all down fails its requests, never sends them to another cell', async (t) => {
  const parent = await a.createParent()
  const before = counts()
  for (let i = 0; i < 6; i++) {
    const res = await get(a, parent.apiKey, '/down/x', 'self')
    t.equal(res.status, 502, `eu is down: 502 (${res.body})`)
  }
  t.same(since(before), {}, 'the us target got none of them')
  t.equal(await metricValue(a.app, 'tgw_upstream_target_up', { route: '/down', cell: 'eu' }), 0, 'eu is out')
  t.equal(await metricValue(a.app, 'tgw_upstream_panic', { route: '/down' }), 1, 'and its cell panics')
})

t.test('a PATCH on A moves the tenant on B within 1 s; the log and the event carry the cell', async (t) => {
  const parent = await a.createParent()
  await operator.ok(t, ['accounts', 'placement', '--account', parent.id, '--cells', 'eu,us'])
  const sub = await created(t, parent.apiKey, { name: 'mover', placement: 'us' })
  // B's caches hold the tenant in us.
  const warm = await get(b, parent.apiKey, '/api/x', sub.id)
  t.equal(warm.json().headers['x-service-cell'], 'us')
  const requestId = warm.headers['x-request-id'] as string

  const patch = await manage(a, parent.apiKey, 'PATCH', `/${sub.id}`, { placement: 'eu' })
  t.equal(patch.status, 200)
  t.equal(patch.json().placement, 'eu')
  let last: RawResponse | null = null
  const took = await eventually(1_000, async () => {
    last = await get(b, parent.apiKey, '/api/x', sub.id)
    return last.status === 200 && last.json().headers['x-service-cell'] === 'eu'
  })
  t.not(took, null, `B routes to eu within 1 s (last: ${(last as RawResponse | null)?.body})`)
  t.comment(`B followed in ${took} ms`)

  const events = await eventsOf(sql, parent.id)
  const updated = events.find((e) => e.type === 'sub_account.updated')
  t.match(updated, { data: { object: { id: sub.id, placement: 'eu' }, previous: { placement: 'us' } } })

  let record: JsonBody | null = null
  t.ok(
    await until(5_000, async () => {
      const res = await callAs(b.url, parent.apiKey, { path: `/v1/sub-accounts/requests/${requestId}`, acting: 'self' })
      if (res.status === 200) record = res.json()
      return record !== null
    }),
    'the request is in the log',
  )
  t.equal(record!.cell, 'us', 'the log records the cell that served it')
  const listed = await callAs(b.url, parent.apiKey, { path: '/v1/sub-accounts/requests?limit=50', acting: 'self' })
  t.ok(
    listed.json().data.some((r: JsonBody) => r.id === requestId && r.cell === 'us'),
    'and the list shows it',
  )
})

t.test("a tenant's WebSocket on its old cell closes with 1012 when a PATCH moves it", async (t) => {
  const parent = await a.createParent()
  await operator.ok(t, ['accounts', 'placement', '--account', parent.id, '--cells', 'eu,us'])
  const sub = await created(t, parent.apiKey, { name: 'live', placement: 'us' })
  const stays = await created(t, parent.apiKey, { name: 'stays', placement: 'us' })
  const opened = (id: string) =>
    openSocket(t, `${b.url}/live/feed`, { key: parent.apiKey, headers: { 'x-service-acting-tenant': id } })
  const socket = await opened(sub.id)
  const other = await opened(stays.id)
  t.equal(wsUs.upgrades.at(-1)!['x-service-cell'], 'us', 'the socket went to us, with X-Service-Cell')
  t.equal(wsEu.upgrades.length, 0, 'none to eu')

  const patch = await manage(a, parent.apiKey, 'PATCH', `/${sub.id}`, { placement: 'eu' })
  t.equal(patch.status, 200)
  // Bounded, so that a socket never closed fails here rather than at the test's timeout.
  const closed = await orTimeout(socket.closed, 10_000, null)
  t.equal(closed?.code, 1012, 'closed with 1012 so that the client reconnects')
  t.equal(other.ws.readyState, other.ws.OPEN, "another tenant's socket stays open")

  const again = await opened(sub.id)
  t.equal(wsEu.upgrades.at(-1)!['x-service-cell'], 'eu', 'the reconnect lands on eu')
  again.ws.close()
  other.ws.close()
})

t.test("a change of the parent's default closes the sockets of its sub-accounts placed nowhere", async (t) => {
  const parent = await a.createParent()
  await operator.ok(t, ['accounts', 'placement', '--account', parent.id, '--cells', 'eu,us'])
  const sub = await created(t, parent.apiKey, { name: 'follows its parent' })
  const placed = await created(t, parent.apiKey, { name: 'placed in eu', placement: 'eu' })
  // Their own keys: the socket names the sub-account alone, and its parent through its cell.
  const keyOf = async (id: string) => {
    const res = await manage(a, parent.apiKey, 'POST', `/${id}/api-keys`, { name: 'live', scopes: ['orders:read'] })
    t.equal(res.status, 201, res.body)
    return res.json().api_key as string
  }
  const follows = await openSocket(t, `${b.url}/live/feed`, { key: await keyOf(sub.id) })
  const stays = await openSocket(t, `${b.url}/live/feed`, { key: await keyOf(placed.id) })
  t.equal(wsEu.upgrades.at(-1)!['x-service-cell'], 'eu')

  await operator.ok(t, ['accounts', 'placement', '--account', parent.id, '--cells', 'eu,us', '--default', 'us'])
  const closed = await orTimeout(follows.closed, 10_000, null)
  t.equal(closed?.code, 1012, "the sub-account placed nowhere moved with its parent's default: 1012")
  t.equal(stays.ws.readyState, stays.ws.OPEN, 'the one placed in eu stays')
  stays.ws.close()
})
