// An unknown query parameter is refused, never ignored (docs/api.md, Conventions), on every route
// of the management API and of the portal's: `?bogus=1` is 400 validation_failed naming
// `/querystring/bogus`, and the call changes nothing (a revoke leaves its key working, a create
// makes nothing, an exchange leaves its link unspent). The routes come from the app itself, so a
// new route the table does not cover fails here until it is given its line. The one exception,
// `GET /v1/sub-accounts/{sub_id}`, ignores one; the token endpoint, ops routes, the console, the
// portal's page and proxied paths are untouched.
import { randomUUID } from 'node:crypto'
import t from 'tap'
import type { LightMyRequestResponse } from 'fastify'
import { CONSOLE_PREFIX, PORTAL_API, PORTAL_PREFIX, TOKEN_PATH } from '../../src/shared/paths.js'
import { type RegisteredRoute, startGateway } from '../helpers/gateway.js'
import type { JsonBody } from '../helpers/json.js'
import { problemOf } from '../helpers/problems.js'
import { startUpstream } from '../helpers/upstream.js'

const upstream = await startUpstream(t)
const gw = await startGateway(t, {
  listen: false,
  recordRoutes: true,
  env: { ISSUER_URL: 'https://gw.example', WEBHOOKS_ALLOW_INSECURE: 'true' },
  gatewayConfig: { routes: [{ prefix: '/orders', upstream: upstream.url }] },
  // The requests' log is written only when the test is over: it is no change a call made.
  requestLog: { flushIntervalMs: 3_600_000 },
})
const parent = await gw.createParent()

const manage = (method: string, path: string, body?: unknown) =>
  gw.call(parent.apiKey, { method: method as 'GET', url: `/v1/sub-accounts${path}`, body, acting: 'self' })

function ok(res: LightMyRequestResponse, status: number): JsonBody {
  if (res.statusCode !== status) throw new Error(`expected ${status}, got ${res.statusCode}: ${res.body}`)
  return res.json()
}

const sub = ok(await manage('POST', '', { name: 'customer' }), 201).id as string
const subKey = ok(await manage('POST', `/${sub}/api-keys`, { name: 'k', scopes: ['things:read'] }), 201)
const session = ok(
  await manage('POST', `/${sub}/portal-sessions`, {
    permissions: ['keys:read', 'keys:write', 'usage:read', 'requests:read'],
  }),
  201,
)
const tokenOf = (made: JsonBody) => (made.url as string).split('#')[1]!
const exchanged = await gw.app.inject({
  method: 'POST',
  url: `${PORTAL_API}/session`,
  headers: { 'content-type': 'application/json' },
  payload: JSON.stringify({ token: tokenOf(session) }),
})
const cookie = /^tgw_portal=([^;]+)/.exec(String(exchanged.headers['set-cookie']))![1]!
// A link not yet exchanged: an exchange with ?bogus=1 must leave it unspent.
const unspent = tokenOf(ok(await manage('POST', `/${sub}/portal-sessions`, { permissions: ['keys:read'] }), 201))
const event = (ok(await manage('GET', '/events?limit=1'), 200).data as JsonBody[])[0]!.id as string
// Subscribed to nothing this test makes happen: no delivery runs while the walk compares the store.
const endpoint = ok(
  await manage('POST', '/webhook-endpoints', {
    url: 'http://127.0.0.1:9/hook',
    event_types: ['sub_account.deactivated'],
  }),
  201,
).id as string

const plan = ok(await manage('POST', '/plans', { name: 'plan' }), 201).id as string

const PATH_VALUES: Record<string, string> = {
  plan_id: plan,
  sub_id: sub,
  key_id: subKey.id as string,
  session_id: session.id as string,
  endpoint_id: endpoint,
  event_id: event,
  id: randomUUID(),
  grant_id: randomUUID(),
}

/** What a route is sent with `?bogus=1`: a valid body, so that only the query is at fault. */
type Line = { body?: unknown; ignores?: true; contentType?: string }

/** Every route of the management API and of the portal's, by the method and pattern it is registered under. */
const TABLE: Record<string, Line> = {
  'POST /v1/sub-accounts': { body: { name: 'made by a bogus query', external_id: 'bogus' } },
  'GET /v1/sub-accounts': {},
  'GET /v1/sub-accounts/usage': {},
  'GET /v1/sub-accounts/usage/export': {},
  'GET /v1/sub-accounts/usage/reconciliation': {},
  'GET /v1/sub-accounts/limits': {},
  'POST /v1/sub-accounts/limits/simulations': {
    // A range the request log holds: without its query, the simulation would run.
    body: {
      limits: { rate: { requests: 5, per_seconds: 60 } },
      from: new Date(Date.now() - 3_600_000).toISOString(),
      to: new Date(Date.now() - 60_000).toISOString(),
    },
  },
  'GET /v1/sub-accounts/events': {},
  'GET /v1/sub-accounts/events/:event_id': {},
  'GET /v1/sub-accounts/scopes': {},
  'GET /v1/sub-accounts/routes': {},
  'POST /v1/sub-accounts/plans': { body: { name: 'made by a bogus query' } },
  'GET /v1/sub-accounts/plans': {},
  'GET /v1/sub-accounts/plans/:plan_id': {},
  'PATCH /v1/sub-accounts/plans/:plan_id': { body: { name: 'renamed by a bogus query' } },
  'DELETE /v1/sub-accounts/plans/:plan_id': {},
  'GET /v1/sub-accounts/settings': {},
  'PATCH /v1/sub-accounts/settings': { body: { default_plan_id: plan } },
  'POST /v1/sub-accounts/api-keys/imports': { body: '', contentType: 'application/x-ndjson' },
  'POST /v1/sub-accounts/api-keys/leaks': { body: { key: 'k' } },
  'GET /v1/sub-accounts/requests': {},
  'GET /v1/sub-accounts/requests/:id': {},
  'POST /v1/sub-accounts/webhook-endpoints': {
    body: { url: 'http://127.0.0.1:9/other', event_types: ['api_key.*'] },
  },
  'GET /v1/sub-accounts/webhook-endpoints': {},
  'GET /v1/sub-accounts/webhook-endpoints/:endpoint_id': {},
  'DELETE /v1/sub-accounts/webhook-endpoints/:endpoint_id': {},
  'PATCH /v1/sub-accounts/webhook-endpoints/:endpoint_id': { body: { description: 'changed by a bogus query' } },
  'POST /v1/sub-accounts/webhook-endpoints/:endpoint_id/test': {},
  'POST /v1/sub-accounts/webhook-endpoints/:endpoint_id/deliveries/:event_id/retry': {},
  'GET /v1/sub-accounts/webhook-endpoints/:endpoint_id/deliveries': {},
  // docs/api.md, Get: any other query parameter than `include` is ignored, as it always was.
  'GET /v1/sub-accounts/:sub_id': { ignores: true },
  'GET /v1/sub-accounts/:sub_id/usage': {},
  'PATCH /v1/sub-accounts/:sub_id': { body: { name: 'renamed by a bogus query' } },
  'POST /v1/sub-accounts/:sub_id/deactivate': {},
  'POST /v1/sub-accounts/:sub_id/reactivate': {},
  'POST /v1/sub-accounts/:sub_id/api-keys': { body: { name: 'minted by a bogus query', scopes: ['a:b'] } },
  'GET /v1/sub-accounts/:sub_id/api-keys': {},
  'POST /v1/sub-accounts/:sub_id/credits/grants': { body: { meter: 'tokens', units: 1 } },
  'GET /v1/sub-accounts/:sub_id/credits': {},
  'GET /v1/sub-accounts/:sub_id/credits/history': {},
  'POST /v1/sub-accounts/:sub_id/credits/grants/:grant_id/void': {},
  'GET /v1/sub-accounts/:sub_id/api-keys/:key_id': {},
  'POST /v1/sub-accounts/:sub_id/api-keys/:key_id/revoke': {},
  'POST /v1/sub-accounts/:sub_id/api-keys/:key_id/roll': {},
  'POST /v1/sub-accounts/:sub_id/portal-sessions': { body: { permissions: ['keys:read'] } },
  'GET /v1/sub-accounts/:sub_id/portal-sessions': {},
  'DELETE /v1/sub-accounts/:sub_id/portal-sessions/:session_id': {},
  [`POST ${PORTAL_API}/session`]: { body: { token: unspent } },
  [`GET ${PORTAL_API}/session`]: {},
  [`GET ${PORTAL_API}/keys`]: {},
  [`POST ${PORTAL_API}/keys`]: { body: { name: 'minted in the portal by a bogus query', scopes: ['things:read'] } },
  [`POST ${PORTAL_API}/keys/:key_id/revoke`]: {},
  [`POST ${PORTAL_API}/keys/:key_id/roll`]: {},
  [`GET ${PORTAL_API}/usage`]: {},
  [`GET ${PORTAL_API}/credits`]: {},
  [`GET ${PORTAL_API}/requests`]: {},
}

/**
 * The app's management and portal API routes, one per method and pattern: a prefixed root's
 * trailing-slash alias is the route itself, and a HEAD route is its GET route.
 */
function apiRoutes(registered: readonly RegisteredRoute[]): string[] {
  const names = registered
    .map(({ method, url }) => ({ method: method === 'HEAD' ? 'GET' : method, url: url.replace(/(.)\/$/, '$1') }))
    .filter(({ url }) => url.startsWith('/v1/sub-accounts') || url.startsWith(`${PORTAL_API}/`))
    .map(({ method, url }) => `${method} ${url}`)
  return [...new Set(names)]
}

/** A request as the route's caller sends it: the parent's key, or the portal session's cookie. */
function send(name: string, query: string, body?: unknown, contentType?: string): Promise<LightMyRequestResponse> {
  const [method, pattern] = name.split(' ') as [string, string]
  const url = `${pattern.replace(/:(\w+)/g, (_, id: string) => PATH_VALUES[id]!)}${query}`
  if (!pattern.startsWith(PORTAL_API))
    return gw.call(parent.apiKey, {
      method: method as 'GET',
      url,
      body,
      acting: 'self',
      ...(contentType === undefined ? {} : { headers: { 'content-type': contentType } }),
    })
  return gw.app.inject({
    method: method as 'GET',
    url,
    headers: { cookie: `tgw_portal=${cookie}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { payload: JSON.stringify(body) }),
  })
}

/** What a call could change, as rows (a key's last use aside: a flush of usage may write it). */
const TABLES = [
  'tenants',
  'tenant_name_words',
  'api_keys',
  'portal_sessions',
  'webhook_endpoints',
  'webhook_deliveries',
  'webhook_attempts',
  'events',
  'idempotency_keys',
]
async function store(): Promise<Record<string, unknown>> {
  const rows: Record<string, unknown> = {}
  for (const table of TABLES) {
    const [row] = await gw.sql.unsafe(
      `select coalesce(jsonb_agg(to_jsonb(x) - 'last_used_at' order by to_jsonb(x)::text), '[]') as rows from ${table} x`,
    )
    rows[table] = row!.rows
  }
  return rows
}

t.test('the table has a line for every management and portal API route, and no other', async (t) => {
  const registered = apiRoutes(gw.routes)
  t.ok(registered.length >= 40, `${registered.length} routes registered`)
  t.same(
    registered.filter((name) => TABLE[name] === undefined),
    [],
    'every route has a line',
  )
  t.same(
    Object.keys(TABLE).filter((name) => !registered.includes(name)),
    [],
    'every line is a route',
  )
})

t.test('every route refuses ?bogus=1 with 400 validation_failed, and nothing changes', async (t) => {
  const before = await store()
  for (const name of apiRoutes(gw.routes)) {
    const line = TABLE[name]
    if (line === undefined || line.ignores) continue
    const res = await send(name, '?bogus=1', line.body, line.contentType)
    t.equal(res.statusCode, 400, `${name}?bogus=1: 400 (${res.body.slice(0, 200)})`)
    if (res.statusCode !== 400) continue
    const problem = problemOf(res)
    t.equal(problem.code, 'validation_failed', `${name}: validation_failed`)
    t.match(problem.errors, [{ path: '/querystring/bogus', message: /is not a known field/ }], `${name}: names it`)
  }
  // One another caller would send: the change is not made either.
  const dryRun = await send(`POST /v1/sub-accounts/:sub_id/api-keys/:key_id/revoke`, '?dry_run=1')
  t.equal(dryRun.statusCode, 400, '?dry_run=1 on a revoke: 400')
  t.same(await store(), before, 'no row was written, changed or deleted')

  // The key refused a revoke still authenticates; the session refused a DELETE still opens the portal.
  const byKey = await gw.call(subKey.api_key as string, { method: 'GET', url: '/v1/sub-accounts' })
  t.equal(problemOf(byKey).code, 'parent_key_required', "the sub-account's key still authenticates")
  t.equal((await send(`GET ${PORTAL_API}/session`, '')).statusCode, 200, 'the portal session is still open')
  const again = await send(`POST ${PORTAL_API}/session`, '', { token: unspent })
  t.equal(again.statusCode, 201, 'the link refused an exchange with ?bogus=1 is still unspent')
})

t.test('GET /v1/sub-accounts/{sub_id} ignores a parameter it does not know, as documented', async (t) => {
  const plain = await send('GET /v1/sub-accounts/:sub_id', '')
  const bogus = await send('GET /v1/sub-accounts/:sub_id', '?bogus=1')
  t.equal(bogus.statusCode, 200, '200 with ?bogus=1')
  t.same(bogus.json(), plain.json(), 'the same sub-account')
  const include = await send('GET /v1/sub-accounts/:sub_id', '?include=nonsense')
  t.equal(include.statusCode, 400, 'its own parameter is still checked')
})

t.test('a parameter with no value is still no parameter', async (t) => {
  const res = await send('POST /v1/sub-accounts/:sub_id/deactivate', '?bogus=')
  t.equal(res.statusCode, 200, 'deactivated')
  t.equal((await send('POST /v1/sub-accounts/:sub_id/reactivate', '?bogus=&other=')).statusCode, 200, 'reactivated')
})

t.test('the token endpoint, ops routes, the console, the portal page and proxied paths are untouched', async (t) => {
  for (const url of ['/healthz', '/readyz', '/openapi.json', CONSOLE_PREFIX, `${PORTAL_PREFIX}/`]) {
    const plain = await gw.app.inject({ method: 'GET', url })
    t.not(plain.statusCode, 400, `${url}: no 400 without a query`)
    const res = await gw.app.inject({ method: 'GET', url: `${url}?bogus=1` })
    t.equal(res.statusCode, plain.statusCode, `${url}?bogus=1: ${plain.statusCode}, as without it`)
  }
  const token = await gw.app.inject({
    method: 'POST',
    url: `${TOKEN_PATH}?bogus=1`,
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    payload: 'grant_type=client_credentials',
  })
  t.equal(token.statusCode, 400, 'the token endpoint refuses any query')
  t.match(token.json(), { error: 'invalid_request' }, "in RFC 6749's words, as before")
  const proxied = await gw.call(subKey.api_key as string, { method: 'GET', url: '/orders/1?bogus=1&dry_run=' })
  t.equal(proxied.statusCode, 200, 'proxied: 200')
  t.equal(upstream.received.at(-1)?.url, '/orders/1?bogus=1&dry_run=', 'the upstream got the query as sent')
})
