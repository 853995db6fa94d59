// Authentication, authorization and the acting header on every management route (docs/api.md),
// in the spirit of Unkey's runCommonRouteTests: one table of routes, one set of checks for each.
// The routes come from the app itself (every route it registers), so a new route that the table
// does not cover fails here until it is given its line.
import t from 'tap'
import { generateApiKey } from '../../src/auth/key-format.js'
import { CONSOLE_PREFIX, CREDENTIAL_PATHS, PORTAL_PREFIX, SECRET_SCANNING_GITHUB_PATH } from '../../src/shared/paths.js'

import { revokeKey } from '../../src/store/api-keys.js'
import { startGateway, type RegisteredRoute, type TestGateway } from '../helpers/gateway.js'
import { problemOf } from '../helpers/problems.js'
import type { TestLike } from '../helpers/test-like.js'

interface RouteCase {
  body?: unknown
  scope: 'sub_accounts:read' | 'sub_accounts:write'
  /** True when the path names a sub-account, so another parent's gets 404. */
  namesSubAccount: boolean
}

interface Route extends RouteCase {
  method: string
  /** The registered pattern, for names. */
  pattern: string
  url: string
}

/** Every management route, by the method and pattern it is registered under. */
const TABLE: Record<string, RouteCase> = {
  'POST /v1/sub-accounts': { body: { name: 'n' }, scope: 'sub_accounts:write', namesSubAccount: false },
  'GET /v1/sub-accounts': { scope: 'sub_accounts:read', namesSubAccount: false },
  'GET /v1/sub-accounts/usage': { scope: 'sub_accounts:read', namesSubAccount: false },
  'GET /v1/sub-accounts/usage/export': { scope: 'sub_accounts:read', namesSubAccount: false },
  'GET /v1/sub-accounts/usage/reconciliation': { scope: 'sub_accounts:read', namesSubAccount: false },
  'GET /v1/sub-accounts/limits': { scope: 'sub_accounts:read', namesSubAccount: false },
  'POST /v1/sub-accounts/limits/simulations': {
    body: {
      limits: { rate: { requests: 5, per_seconds: 60 } },
      from: '2026-01-01T00:00:00Z',
      to: '2026-01-02T00:00:00Z',
    },
    scope: 'sub_accounts:read',
    namesSubAccount: false,
  },
  'GET /v1/sub-accounts/events': { scope: 'sub_accounts:read', namesSubAccount: false },
  'GET /v1/sub-accounts/events/:event_id': { scope: 'sub_accounts:read', namesSubAccount: false },
  'GET /v1/sub-accounts/scopes': { scope: 'sub_accounts:read', namesSubAccount: false },
  'GET /v1/sub-accounts/routes': { scope: 'sub_accounts:read', namesSubAccount: false },
  'POST /v1/sub-accounts/plans': { body: { name: 'p' }, scope: 'sub_accounts:write', namesSubAccount: false },
  'GET /v1/sub-accounts/plans': { scope: 'sub_accounts:read', namesSubAccount: false },
  'GET /v1/sub-accounts/plans/:plan_id': { scope: 'sub_accounts:read', namesSubAccount: false },
  'PATCH /v1/sub-accounts/plans/:plan_id': { body: { name: 'p' }, scope: 'sub_accounts:write', namesSubAccount: false },
  'DELETE /v1/sub-accounts/plans/:plan_id': { scope: 'sub_accounts:write', namesSubAccount: false },
  'GET /v1/sub-accounts/settings': { scope: 'sub_accounts:read', namesSubAccount: false },
  'POST /v1/sub-accounts/api-keys/imports': { body: {}, scope: 'sub_accounts:write', namesSubAccount: false },
  'POST /v1/sub-accounts/api-keys/leaks': { body: { key: 'k' }, scope: 'sub_accounts:write', namesSubAccount: false },
  'PATCH /v1/sub-accounts/settings': {
    body: { default_plan_id: null },
    scope: 'sub_accounts:write',
    namesSubAccount: false,
  },
  'GET /v1/sub-accounts/requests': { scope: 'sub_accounts:read', namesSubAccount: false },
  'GET /v1/sub-accounts/requests/:id': { scope: 'sub_accounts:read', namesSubAccount: false },
  'POST /v1/sub-accounts/webhook-endpoints': {
    body: { url: 'https://example.com/hook', event_types: ['api_key.*'] },
    scope: 'sub_accounts:write',
    namesSubAccount: false,
  },
  'GET /v1/sub-accounts/webhook-endpoints': { scope: 'sub_accounts:read', namesSubAccount: false },
  'GET /v1/sub-accounts/webhook-endpoints/:endpoint_id': { scope: 'sub_accounts:read', namesSubAccount: false },
  'DELETE /v1/sub-accounts/webhook-endpoints/:endpoint_id': { scope: 'sub_accounts:write', namesSubAccount: false },
  'PATCH /v1/sub-accounts/webhook-endpoints/:endpoint_id': {
    body: { description: 'd' },
    scope: 'sub_accounts:write',
    namesSubAccount: false,
  },
  'POST /v1/sub-accounts/webhook-endpoints/:endpoint_id/test': { scope: 'sub_accounts:write', namesSubAccount: false },
  'POST /v1/sub-accounts/webhook-endpoints/:endpoint_id/deliveries/:event_id/retry': {
    scope: 'sub_accounts:write',
    namesSubAccount: false,
  },
  'GET /v1/sub-accounts/webhook-endpoints/:endpoint_id/deliveries': {
    scope: 'sub_accounts:read',
    namesSubAccount: false,
  },
  'GET /v1/sub-accounts/:sub_id': { scope: 'sub_accounts:read', namesSubAccount: true },
  'GET /v1/sub-accounts/:sub_id/usage': { scope: 'sub_accounts:read', namesSubAccount: true },
  'PATCH /v1/sub-accounts/:sub_id': { body: { name: 'n' }, scope: 'sub_accounts:write', namesSubAccount: true },
  'POST /v1/sub-accounts/:sub_id/deactivate': { scope: 'sub_accounts:write', namesSubAccount: true },
  'POST /v1/sub-accounts/:sub_id/reactivate': { scope: 'sub_accounts:write', namesSubAccount: true },
  'POST /v1/sub-accounts/:sub_id/api-keys': {
    body: { name: 'k', scopes: ['a:b'] },
    scope: 'sub_accounts:write',
    namesSubAccount: true,
  },
  'GET /v1/sub-accounts/:sub_id/api-keys': { scope: 'sub_accounts:read', namesSubAccount: true },
  'POST /v1/sub-accounts/:sub_id/credits/grants': {
    body: { meter: 'tokens', units: 1 },
    scope: 'sub_accounts:write',
    namesSubAccount: true,
  },
  'GET /v1/sub-accounts/:sub_id/credits': { scope: 'sub_accounts:read', namesSubAccount: true },
  'GET /v1/sub-accounts/:sub_id/credits/history': { scope: 'sub_accounts:read', namesSubAccount: true },
  'POST /v1/sub-accounts/:sub_id/credits/grants/:grant_id/void': { scope: 'sub_accounts:write', namesSubAccount: true },
  'GET /v1/sub-accounts/:sub_id/api-keys/:key_id': { scope: 'sub_accounts:read', namesSubAccount: true },
  'POST /v1/sub-accounts/:sub_id/api-keys/:key_id/revoke': { scope: 'sub_accounts:write', namesSubAccount: true },
  'POST /v1/sub-accounts/:sub_id/api-keys/:key_id/roll': { scope: 'sub_accounts:write', namesSubAccount: true },
  'POST /v1/sub-accounts/:sub_id/portal-sessions': {
    body: { permissions: ['keys:read'] },
    scope: 'sub_accounts:write',
    namesSubAccount: true,
  },
  'GET /v1/sub-accounts/:sub_id/portal-sessions': { scope: 'sub_accounts:read', namesSubAccount: true },
  'DELETE /v1/sub-accounts/:sub_id/portal-sessions/:session_id': {
    scope: 'sub_accounts:write',
    namesSubAccount: true,
  },
}

/**
 * The routes that need no key: health, readiness, the API's description, the console's page and
 * assets (its calls are the management API's, with the user's key), the credential paths
 * (the token endpoint authenticates clients its own way: test/integration/token-endpoint.test.ts),
 * and the sub-account portal, which takes a portal session and never a key
 * (test/integration/portal-sessions.test.ts).
 */
function isOpsRoute(url: string): boolean {
  return (
    ['/healthz', '/readyz', '/openapi.json', '/docs', CONSOLE_PREFIX, PORTAL_PREFIX, ...CREDENTIAL_PATHS].includes(
      url,
    ) ||
    // GitHub's secret scanning reports carry no key: their signature is their authentication
    // (key-leaks.test.ts holds it).
    url === SECRET_SCANNING_GITHUB_PATH ||
    url.startsWith('/docs/') ||
    url.startsWith(`${CONSOLE_PREFIX}/`) ||
    url.startsWith(`${PORTAL_PREFIX}/`)
  )
}

/**
 * The app's routes that are not ops routes, one per method and pattern: a prefixed root's
 * trailing-slash alias is the route itself, and a HEAD route is the GET route whose hooks it runs.
 */
function managementRoutes(registered: readonly RegisteredRoute[]): string[] {
  const names = registered
    .map(({ method, url }) => ({
      method: method === 'HEAD' ? 'GET' : method,
      url: url.length > 1 ? url.replace(/\/$/, '') : url,
    }))
    .filter(({ url }) => !isOpsRoute(url))
    .map(({ method, url }) => `${method} ${url}`)
  return [...new Set(names)]
}

function routes(registered: readonly RegisteredRoute[], subId: string, keyId: string): Route[] {
  return managementRoutes(registered).flatMap((name) => {
    const line = TABLE[name]
    if (line === undefined) return []
    const [method, pattern] = name.split(' ') as [string, string]
    return [{ ...line, method, pattern, url: pattern.replace(':sub_id', subId).replace(':key_id', keyId) }]
  })
}

async function setup(t: TestLike) {
  const gw = await startGateway(t, { listen: false, redis: false, recordRoutes: true })
  const owner = await gw.createParent()
  const sub = (
    await gw.call(owner.apiKey, {
      method: 'POST',
      url: '/v1/sub-accounts',
      body: { name: 'mine', external_id: 'mine' },
    })
  ).json()
  const subKey = (
    await gw.call(owner.apiKey, {
      method: 'POST',
      url: `/v1/sub-accounts/${sub.id}/api-keys`,
      acting: 'self',
      body: { name: 'k', scopes: ['tracking:read'] },
    })
  ).json()
  return { gw, owner, sub, subKey }
}

const send = (
  gw: TestGateway,
  key: string | null,
  route: Route,
  extra: { acting?: string; headers?: Record<string, string> } = {},
) =>
  gw.call(key, {
    method: route.method as 'GET',
    url: route.url,
    ...(route.body === undefined ? {} : { body: route.body }),
    ...extra,
  })

t.test('the table has a line for every route the app registers, and no other', async (t) => {
  const { gw } = await setup(t)
  const registered = managementRoutes(gw.routes)
  t.ok(registered.length > 0, `the app registers management routes (${registered.length})`)
  t.same(
    registered.filter((name) => TABLE[name] === undefined),
    [],
    'every management route the app registers has a line in the table',
  )
  t.same(
    Object.keys(TABLE).filter((name) => !registered.includes(name)),
    [],
    'every line of the table is a route the app registers',
  )
})

t.test('every management route refuses what it must', async (t) => {
  const { gw, owner, sub, subKey } = await setup(t)
  const table = routes(gw.routes, sub.id, subKey.id)

  const revoked = await gw.createParent()
  const revokedKeyId = (await gw.sql`select id from api_keys where tenant_id = ${revoked.id}`)[0]!.id
  await revokeKey(gw.sql, revoked.id, revokedKeyId)
  // Active in the table, past its expiry: refused as expired, not as unknown.
  const expired = await gw.createParent()
  await gw.sql`update api_keys set expires_at = now() - interval '1 second' where tenant_id = ${expired.id}`
  const readOnly = await gw.createParent({ scopes: ['sub_accounts:read'] })
  const writeOnly = await gw.createParent({ scopes: ['sub_accounts:write'] })
  const stranger = await gw.createParent()
  const before = await gw.sql`select * from tenants order by seq`
  const keysBefore = await gw.sql`select id, status from api_keys order by seq`

  for (const route of table) {
    const name = `${route.method} ${route.pattern.replace(':sub_id', '{sub_id}').replace(':key_id', '{key_id}')}`
    t.test(name, async (t) => {
      const expect401 = async (key: string | null, headers: Record<string, string>, why: string) => {
        const res = await gw.call(key, {
          method: route.method as 'GET',
          url: route.url,
          headers,
          ...(route.body === undefined ? {} : { body: route.body }),
        })
        t.equal(res.statusCode, 401, why)
        t.equal(problemOf(res).code, 'unauthenticated', why)
        t.equal(res.headers['www-authenticate'], 'Bearer', why)
      }
      await expect401(null, {}, 'no key')
      await expect401(null, { authorization: '' }, 'empty Authorization')
      await expect401(null, { authorization: `Basic ${Buffer.from('a:b').toString('base64')}` }, 'another scheme')
      await expect401(null, { authorization: 'Bearer' }, 'no token')
      await expect401('tgw_short', {}, 'malformed key')
      await expect401(owner.apiKey.slice(0, -1) + (owner.apiKey.endsWith('a') ? 'b' : 'a'), {}, 'bad checksum')
      await expect401(generateApiKey().apiKey, {}, 'unknown well-formed key')
      await expect401(revoked.apiKey, {}, 'revoked key')
      const expiredKey = await send(gw, expired.apiKey, route, { acting: 'self' })
      t.equal(expiredKey.statusCode, 401, 'expired key')
      t.equal(problemOf(expiredKey).code, 'key_expired', 'expired key')
      t.equal(
        expiredKey.headers['www-authenticate'],
        'Bearer error="invalid_token", error_description="the key has expired"',
        'expired key',
      )
      // Node keeps the first of two Authorization headers; the gateway refuses the pair.
      await expect401(
        null,
        { authorization: [`Bearer ${owner.apiKey}`, 'Bearer junk'] as unknown as string },
        'two Authorization headers',
      )

      const bySub = await send(gw, subKey.api_key, route)
      t.equal(bySub.statusCode, 403, 'sub-account key')
      t.equal(problemOf(bySub).code, 'parent_key_required')

      const actingAsSub = await send(gw, owner.apiKey, route, { acting: sub.id })
      t.equal(actingAsSub.statusCode, 403, 'parent acting as a sub-account')
      t.equal(problemOf(actingAsSub).code, 'parent_key_required')
      const actingByExt = await send(gw, owner.apiKey, route, { acting: 'ext:mine' })
      t.equal(problemOf(actingByExt).code, 'parent_key_required', 'parent acting by ext:')

      const malformed = await send(gw, owner.apiKey, route, { acting: 'SELF' })
      t.equal(malformed.statusCode, 400)
      t.equal(problemOf(malformed).code, 'acting_tenant_malformed')
      const unknownTarget = await send(gw, owner.apiKey, route, { acting: '00000000-0000-4000-8000-000000000000' })
      t.equal(unknownTarget.statusCode, 403)
      t.equal(problemOf(unknownTarget).code, 'acting_tenant_forbidden')

      const lacking = route.scope === 'sub_accounts:read' ? writeOnly : readOnly
      const noScope = await send(gw, lacking.apiKey, route, { acting: 'self' })
      t.equal(noScope.statusCode, 403, 'missing scope')
      t.equal(problemOf(noScope).code, 'insufficient_scope')
      t.equal(noScope.headers['www-authenticate'], `Bearer error="insufficient_scope", scope="${route.scope}"`)

      if (route.namesSubAccount) {
        const foreign = await send(gw, stranger.apiKey, route, { acting: 'self' })
        t.equal(foreign.statusCode, 404, "another parent's sub-account")
        t.equal(problemOf(foreign).code, 'not_found')
      }
      if (route.method !== 'GET') {
        const required = await send(gw, owner.apiKey, route)
        t.equal(required.statusCode, 400, 'a write without the header while sub-accounts are active')
        t.equal(problemOf(required).code, 'acting_tenant_required')
      }
    })
  }
  t.test('none of that changed anything', async (t) => {
    t.same(await gw.sql`select * from tenants order by seq`, before)
    t.same(await gw.sql`select id, status from api_keys order by seq`, keysBefore)
  })
})

t.test('checks run in the documented order', async (t) => {
  const { gw, owner, sub, subKey } = await setup(t)
  // 401 before the body is even read: a bad body with no key is a 401, not a 400.
  const noKeyBadBody = await gw.call(null, { method: 'POST', url: '/v1/sub-accounts', body: '{not json' })
  t.equal(problemOf(noKeyBadBody).code, 'unauthenticated')
  // The acting header before authorization: a sub-account key naming another tenant is 403 acting_tenant_forbidden.
  const subOther = await gw.call(subKey.api_key, { method: 'GET', url: '/v1/sub-accounts', acting: owner.id })
  t.equal(problemOf(subOther).code, 'acting_tenant_forbidden')
  // Authorization before validation: a read-only key with an invalid body is 403, not 400.
  const readOnly = await gw.createParent({ scopes: ['sub_accounts:read'] })
  const scopeFirst = await gw.call(readOnly.apiKey, { method: 'POST', url: '/v1/sub-accounts', body: { name: 7 } })
  t.equal(problemOf(scopeFirst).code, 'insufficient_scope')
  // The header is required before validation too.
  const requiredFirst = await gw.call(owner.apiKey, { method: 'POST', url: '/v1/sub-accounts', body: { name: 7 } })
  t.equal(problemOf(requiredFirst).code, 'acting_tenant_required')
  // A malformed acting header is 400 even for a key whose sub-account is deactivated (403).
  await gw.call(owner.apiKey, { method: 'POST', url: `/v1/sub-accounts/${sub.id}/deactivate`, acting: 'self' })
  const malformedFirst = await gw.call(subKey.api_key, { method: 'GET', url: '/v1/sub-accounts', acting: 'SELF' })
  t.equal(problemOf(malformedFirst).code, 'acting_tenant_malformed')
  const thenDeactivated = await gw.call(subKey.api_key, { method: 'GET', url: '/v1/sub-accounts', acting: 'self' })
  t.equal(problemOf(thenDeactivated).code, 'tenant_deactivated')
})

t.test('the acting header on management', async (t) => {
  const { gw, owner, sub } = await setup(t)
  const cases: [Record<string, string | string[]>, number, string | null][] = [
    [{ 'x-service-acting-tenant': 'self' }, 201, null],
    [{ 'X-SERVICE-ACTING-TENANT': 'self' }, 201, null],
    // The parent's own UUID names no sub-account of it (docs/api.md, the acting header).
    [{ 'x-service-acting-tenant': owner.id }, 403, 'acting_tenant_forbidden'],
    [{ 'x-service-acting-tenant': owner.id.toUpperCase() }, 403, 'acting_tenant_forbidden'],
    [{ 'x-service-acting-tenant': '' }, 400, 'acting_tenant_malformed'],
    [{ 'x-service-acting-tenant': 'self, self' }, 400, 'acting_tenant_malformed'],
    [{ 'x-service-acting-tenant': ['self', 'self'] }, 400, 'acting_tenant_malformed'],
    [{ 'x-service-acting-tenant': 'ext:' }, 400, 'acting_tenant_malformed'],
    [{ 'x-service-acting-tenant': 'ext:mine' }, 403, 'parent_key_required'],
    [{ 'x-service-acting-tenant': 'ext:unknown' }, 403, 'acting_tenant_forbidden'],
  ]
  for (const [headers, status, code] of cases) {
    const res = await gw.call(owner.apiKey, {
      method: 'POST',
      url: '/v1/sub-accounts',
      body: { name: 'x' },
      headers: headers as Record<string, string>,
    })
    t.equal(res.statusCode, status, JSON.stringify(headers))
    if (code) t.equal(problemOf(res).code, code, JSON.stringify(headers))
  }

  // A deactivated sub-account is rejected as a target, and its keys stop working.
  const key = (
    await gw.call(owner.apiKey, {
      method: 'POST',
      url: `/v1/sub-accounts/${sub.id}/api-keys`,
      acting: 'self',
      body: { name: 'k', scopes: ['a:b'] },
    })
  ).json()
  await gw.call(owner.apiKey, { method: 'POST', url: `/v1/sub-accounts/${sub.id}/deactivate`, acting: 'self' })
  const target = await gw.call(owner.apiKey, { method: 'GET', url: '/v1/sub-accounts', acting: sub.id })
  t.equal(target.statusCode, 403)
  t.equal(problemOf(target).code, 'acting_tenant_deactivated')
  const deactivatedKey = await gw.call(key.api_key, { method: 'GET', url: '/v1/sub-accounts' })
  t.equal(deactivatedKey.statusCode, 403)
  t.equal(problemOf(deactivatedKey).code, 'tenant_deactivated')
  await gw.call(owner.apiKey, { method: 'POST', url: `/v1/sub-accounts/${sub.id}/reactivate`, acting: 'self' })
  t.equal(
    problemOf(await gw.call(key.api_key, { method: 'GET', url: '/v1/sub-accounts' })).code,
    'parent_key_required',
    'works again after reactivation',
  )
})

t.test('the write-header rule follows the count of active sub-accounts', async (t) => {
  const gw = await startGateway(t, { listen: false, redis: false })
  const p = await gw.createParent()
  const create = (acting?: string) =>
    gw.call(p.apiKey, { method: 'POST', url: '/v1/sub-accounts', body: { name: 'x' }, ...(acting ? { acting } : {}) })
  const first = await create()
  t.equal(first.statusCode, 201, 'no sub-account yet: no header needed')
  t.equal(problemOf(await create()).code, 'acting_tenant_required')
  await gw.call(p.apiKey, { method: 'POST', url: `/v1/sub-accounts/${first.json().id}/deactivate`, acting: 'self' })
  t.equal((await create()).statusCode, 201, 'only deactivated sub-accounts: not required')
  t.equal(problemOf(await create()).code, 'acting_tenant_required', 'active again')
  t.equal((await gw.call(p.apiKey, { method: 'GET', url: '/v1/sub-accounts' })).statusCode, 200, 'GET never needs it')
})

t.test('a revoked key is refused on the very next request', async (t) => {
  const { gw, owner, sub, subKey } = await setup(t)
  const second = (
    await gw.call(owner.apiKey, {
      method: 'POST',
      url: `/v1/sub-accounts/${sub.id}/api-keys`,
      acting: 'self',
      body: { name: 'k2', scopes: ['a:b'] },
    })
  ).json()
  const before = await gw.call(second.api_key, { method: 'GET', url: '/v1/sub-accounts' })
  t.equal(problemOf(before).code, 'parent_key_required', 'authenticates before the revoke')
  const revoked = await gw.call(owner.apiKey, {
    method: 'POST',
    url: `/v1/sub-accounts/${sub.id}/api-keys/${second.id}/revoke`,
    acting: 'self',
  })
  t.equal(revoked.statusCode, 200)
  const next = await gw.call(second.api_key, { method: 'GET', url: '/v1/sub-accounts' })
  t.equal(next.statusCode, 401)
  t.equal(problemOf(next).code, 'unauthenticated')
  t.equal(
    problemOf(await gw.call(subKey.api_key, { method: 'GET', url: '/v1/sub-accounts' })).code,
    'parent_key_required',
    'the other key is untouched',
  )
})
