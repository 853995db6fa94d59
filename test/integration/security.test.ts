// Authentication, authorization and the acting header on every management route (DESIGN §3, §4),
// in the spirit of Unkey's runCommonRouteTests: one table of routes, one set of checks for each.
import t from 'tap'
import { generateApiKey } from '../../src/auth/keys.js'
import { revokeKey } from '../../src/store/keys.js'
import { problemOf, testGateway, type TestGateway } from '../helpers/app.js'

interface Route {
  method: 'GET' | 'POST' | 'PATCH'
  url: string
  body?: unknown
  scope: 'sub_accounts:read' | 'sub_accounts:write'
  /** True when the path names a sub-account, so another parent's gets 404. */
  namesSubAccount: boolean
}

function routes(subId: string, keyId: string): Route[] {
  const sub = `/v1/sub-accounts/${subId}`
  return [
    { method: 'POST', url: '/v1/sub-accounts', body: { name: 'n' }, scope: 'sub_accounts:write', namesSubAccount: false },
    { method: 'GET', url: '/v1/sub-accounts', scope: 'sub_accounts:read', namesSubAccount: false },
    { method: 'GET', url: sub, scope: 'sub_accounts:read', namesSubAccount: true },
    { method: 'PATCH', url: sub, body: { name: 'n' }, scope: 'sub_accounts:write', namesSubAccount: true },
    { method: 'POST', url: `${sub}/deactivate`, scope: 'sub_accounts:write', namesSubAccount: true },
    { method: 'POST', url: `${sub}/reactivate`, scope: 'sub_accounts:write', namesSubAccount: true },
    { method: 'POST', url: `${sub}/api-keys`, body: { name: 'k', scopes: ['a:b'] }, scope: 'sub_accounts:write', namesSubAccount: true },
    { method: 'GET', url: `${sub}/api-keys`, scope: 'sub_accounts:read', namesSubAccount: true },
    { method: 'POST', url: `${sub}/api-keys/${keyId}/revoke`, scope: 'sub_accounts:write', namesSubAccount: true },
  ]
}

async function setup(t: { teardown(fn: () => unknown): void }) {
  const gw = await testGateway(t)
  const owner = gw.parent
  const sub = (await gw.call(owner.apiKey, { method: 'POST', url: '/v1/sub-accounts', body: { name: 'mine', external_id: 'mine' } })).json()
  const subKey = (
    await gw.call(owner.apiKey, { method: 'POST', url: `/v1/sub-accounts/${sub.id}/api-keys`, acting: 'self', body: { name: 'k', scopes: ['tracking:read'] } })
  ).json()
  return { gw, owner, sub, subKey }
}


const send = (gw: TestGateway, key: string | null, route: Route, extra: { acting?: string; headers?: Record<string, string> } = {}) =>
  gw.call(key, { method: route.method, url: route.url, ...(route.body === undefined ? {} : { body: route.body }), ...extra })

t.test('every management route refuses what it must', async (t) => {
  const { gw, owner, sub, subKey } = await setup(t)
  const table = routes(sub.id, subKey.id)

  const revoked = await gw.createParent()
  const revokedKeyId = (await gw.sql`select id from api_keys where tenant_id = ${revoked.id}`)[0]!.id
  await revokeKey(gw.sql, revoked.id, revokedKeyId)
  const readOnly = await gw.createParent({ scopes: ['sub_accounts:read'] })
  const writeOnly = await gw.createParent({ scopes: ['sub_accounts:write'] })
  const stranger = await gw.createParent()
  const before = await gw.sql`select * from tenants order by seq`
  const keysBefore = await gw.sql`select id, status from api_keys order by seq`

  for (const route of table) {
    const name = `${route.method} ${route.url.replace(sub.id, '{sub_id}').replace(subKey.id, '{key_id}')}`
    t.test(name, async (t) => {
      const expect401 = async (key: string | null, headers: Record<string, string>, why: string) => {
        const res = await gw.call(key, { method: route.method, url: route.url, headers, ...(route.body === undefined ? {} : { body: route.body }) })
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
      // Node keeps the first of two Authorization headers; the gateway refuses the pair.
      await expect401(null, { authorization: [`Bearer ${owner.apiKey}`, 'Bearer junk'] as unknown as string }, 'two Authorization headers')

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
    [{ 'x-service-acting-tenant': owner.id.toUpperCase() }, 201, null],
    [{ 'x-service-acting-tenant': '' }, 400, 'acting_tenant_malformed'],
    [{ 'x-service-acting-tenant': 'self, self' }, 400, 'acting_tenant_malformed'],
    [{ 'x-service-acting-tenant': ['self', 'self'] }, 400, 'acting_tenant_malformed'],
    [{ 'x-service-acting-tenant': 'ext:' }, 400, 'acting_tenant_malformed'],
    [{ 'x-service-acting-tenant': 'ext:mine' }, 403, 'parent_key_required'],
    [{ 'x-service-acting-tenant': 'ext:unknown' }, 403, 'acting_tenant_forbidden'],
  ]
  for (const [headers, status, code] of cases) {
    const res = await gw.call(owner.apiKey, { method: 'POST', url: '/v1/sub-accounts', body: { name: 'x' }, headers: headers as Record<string, string> })
    t.equal(res.statusCode, status, JSON.stringify(headers))
    if (code) t.equal(problemOf(res).code, code, JSON.stringify(headers))
  }

  // A deactivated sub-account is rejected as a target, and its keys stop working.
  const key = (await gw.call(owner.apiKey, { method: 'POST', url: `/v1/sub-accounts/${sub.id}/api-keys`, acting: 'self', body: { name: 'k', scopes: ['a:b'] } })).json()
  await gw.call(owner.apiKey, { method: 'POST', url: `/v1/sub-accounts/${sub.id}/deactivate`, acting: 'self' })
  const target = await gw.call(owner.apiKey, { method: 'GET', url: '/v1/sub-accounts', acting: sub.id })
  t.equal(target.statusCode, 403)
  t.equal(problemOf(target).code, 'acting_tenant_deactivated')
  const deactivatedKey = await gw.call(key.api_key, { method: 'GET', url: '/v1/sub-accounts' })
  t.equal(deactivatedKey.statusCode, 403)
  t.equal(problemOf(deactivatedKey).code, 'tenant_deactivated')
  await gw.call(owner.apiKey, { method: 'POST', url: `/v1/sub-accounts/${sub.id}/reactivate`, acting: 'self' })
  t.equal(problemOf(await gw.call(key.api_key, { method: 'GET', url: '/v1/sub-accounts' })).code, 'parent_key_required', 'works again after reactivation')
})

t.test('the write-header rule follows the count of active sub-accounts', async (t) => {
  const gw = await testGateway(t)
  const p = gw.parent
  const create = (acting?: string) => gw.call(p.apiKey, { method: 'POST', url: '/v1/sub-accounts', body: { name: 'x' }, ...(acting ? { acting } : {}) })
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
  const second = (await gw.call(owner.apiKey, { method: 'POST', url: `/v1/sub-accounts/${sub.id}/api-keys`, acting: 'self', body: { name: 'k2', scopes: ['a:b'] } })).json()
  const before = await gw.call(second.api_key, { method: 'GET', url: '/v1/sub-accounts' })
  t.equal(problemOf(before).code, 'parent_key_required', 'authenticates before the revoke')
  const revoked = await gw.call(owner.apiKey, { method: 'POST', url: `/v1/sub-accounts/${sub.id}/api-keys/${second.id}/revoke`, acting: 'self' })
  t.equal(revoked.statusCode, 200)
  const next = await gw.call(second.api_key, { method: 'GET', url: '/v1/sub-accounts' })
  t.equal(next.statusCode, 401)
  t.equal(problemOf(next).code, 'unauthenticated')
  t.equal(problemOf(await gw.call(subKey.api_key, { method: 'GET', url: '/v1/sub-accounts' })).code, 'parent_key_required', 'the other key is untouched')
})
