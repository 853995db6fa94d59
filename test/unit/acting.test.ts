// The acting rules of docs/api.md as plain functions, over in-memory lookups: no server, no store.
import t from 'tap'
import { ApiError } from '../../src/errors.js'
import { parseActingHeader, resolveActingTenant, type ActingTarget } from '../../src/tenancy/acting.js'
import type { TenancyLookups, TenantRecord } from '../../src/shared/tenancy-records.js'
import type { Principal } from '../../src/auth/principal.js'

const PARENT = '11111111-1111-4111-8111-111111111111'
const OTHER_PARENT = '22222222-2222-4222-8222-222222222222'
const ACTIVE = 'aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa'
const DEACTIVATED = 'bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb'
const FOREIGN = 'cccccccc-cccc-4ccc-8ccc-cccccccccccc'
const UNKNOWN = 'dddddddd-dddd-4ddd-8ddd-dddddddddddd'

const tenants: TenantRecord[] = [
  { id: PARENT, parentId: null, externalId: 'parent-ext', status: 'active' },
  { id: OTHER_PARENT, parentId: null, externalId: null, status: 'active' },
  { id: ACTIVE, parentId: PARENT, externalId: 'eu', status: 'active' },
  { id: DEACTIVATED, parentId: PARENT, externalId: 'old', status: 'deactivated' },
  { id: FOREIGN, parentId: OTHER_PARENT, externalId: 'theirs', status: 'active' },
]

function lookups(activeCount: (parentId: string) => number): TenancyLookups {
  return {
    keyByDigest: async () => null,
    keyById: async () => null,
    tenant: async (id) => tenants.find((x) => x.id === id) ?? null,
    subAccount: async (parentId, id) => tenants.find((x) => x.id === id && x.parentId === parentId) ?? null,
    subAccountIdByExternalId: async (parentId, ext) =>
      tenants.find((x) => x.parentId === parentId && x.externalId === ext)?.id ?? null,
    hasActiveSubAccounts: async (parentId) => activeCount(parentId) > 0,
    plan: async () => null,
  }
}

const withSubAccounts = lookups((id) => tenants.filter((x) => x.parentId === id && x.status === 'active').length)
const withoutSubAccounts = lookups(() => 0)

function principalOf(tenantId: string): Principal {
  return { key: { id: 'k', tenantId, scopes: [], status: 'active' }, tenant: tenants.find((x) => x.id === tenantId)! }
}

async function errorCode(promise: Promise<unknown>): Promise<string> {
  try {
    await promise
  } catch (err) {
    if (err instanceof ApiError) return err.code
    throw err
  }
  return 'none'
}

const resolve = (tenantId: string, target: ActingTarget, method: string, l = withSubAccounts) =>
  resolveActingTenant(principalOf(tenantId), target, method, l)

t.test('parsing', async (t) => {
  t.same(parseActingHeader(undefined), { kind: 'absent' })
  t.same(parseActingHeader('self'), { kind: 'self' })
  t.same(
    parseActingHeader(ACTIVE.toUpperCase()),
    { kind: 'id', id: ACTIVE },
    'a UUID in either case, answered lower-case',
  )
  t.same(parseActingHeader('ext:eu'), { kind: 'ext', externalId: 'eu' })
  t.same(parseActingHeader('ext:a.b_c-d:e@f/g+h'), { kind: 'ext', externalId: 'a.b_c-d:e@f/g+h' })
  for (const bad of [
    '',
    'SELF',
    'Self',
    'EXT:eu',
    'ext:',
    'ext:a b',
    `ext:${'x'.repeat(129)}`,
    'self, self',
    `${ACTIVE},${ACTIVE}`,
    'me',
    `${ACTIVE}x`,
    'ext:é',
  ]) {
    await t.equal(
      await errorCode(Promise.resolve().then(() => parseActingHeader(bad))),
      'acting_tenant_malformed',
      JSON.stringify(bad),
    )
  }
  t.equal(
    await errorCode(Promise.resolve().then(() => parseActingHeader(['self', 'self']))),
    'acting_tenant_malformed',
    'an array',
  )
  t.equal(
    await errorCode(Promise.resolve().then(() => parseActingHeader('self', 2))),
    'acting_tenant_malformed',
    'sent twice',
  )
})

t.test('a malformed header that looks like a value it takes: what to send instead', async (t) => {
  const detail = (value: string) => {
    try {
      parseActingHeader(value)
    } catch (err) {
      return (err as Error).message
    }
    return 'accepted'
  }
  const start = 'X-Service-Acting-Tenant must be self, a tenant UUID or ext:<external_id>'
  t.equal(detail('acme-eu'), `${start}; to act as the sub-account whose external_id is acme-eu, send ext:acme-eu`)
  t.equal(detail('EXT:acme-eu'), `${start}; the ext: prefix is lower-case: send ext:acme-eu`)
  t.equal(detail('Ext:acme-eu'), `${start}; the ext: prefix is lower-case: send ext:acme-eu`)
  t.equal(detail('SELF'), `${start}; self is lower-case: send self`)
  t.equal(detail('EXT:a b'), start, 'no suggestion of a value that cannot be')
  t.equal(detail('me too'), start)
})

t.test('absent header', async (t) => {
  for (const method of ['POST', 'PUT', 'PATCH', 'DELETE']) {
    t.equal(
      await errorCode(resolve(PARENT, { kind: 'absent' }, method)),
      'acting_tenant_required',
      `${method} with active sub-accounts`,
    )
    t.equal(
      (await resolve(PARENT, { kind: 'absent' }, method, withoutSubAccounts)).id,
      PARENT,
      `${method} without sub-accounts`,
    )
  }
  for (const method of ['GET', 'HEAD', 'OPTIONS']) {
    t.equal((await resolve(PARENT, { kind: 'absent' }, method)).id, PARENT, `${method} never needs it`)
  }
  t.equal((await resolve(ACTIVE, { kind: 'absent' }, 'POST')).id, ACTIVE, 'a sub-account key never needs it')
})

t.test('self', async (t) => {
  t.equal((await resolve(PARENT, { kind: 'self' }, 'POST')).id, PARENT)
  t.equal((await resolve(ACTIVE, { kind: 'self' }, 'POST')).id, ACTIVE)
})

t.test('parent key', async (t) => {
  t.equal((await resolve(PARENT, { kind: 'id', id: ACTIVE }, 'POST')).id, ACTIVE)
  t.equal((await resolve(PARENT, { kind: 'ext', externalId: 'eu' }, 'GET')).id, ACTIVE)
  t.equal(await errorCode(resolve(PARENT, { kind: 'id', id: DEACTIVATED }, 'GET')), 'acting_tenant_deactivated')
  t.equal(await errorCode(resolve(PARENT, { kind: 'ext', externalId: 'old' }, 'POST')), 'acting_tenant_deactivated')
  t.equal(
    await errorCode(resolve(PARENT, { kind: 'id', id: FOREIGN }, 'GET')),
    'acting_tenant_forbidden',
    'another parent’s',
  )
  t.equal(await errorCode(resolve(PARENT, { kind: 'ext', externalId: 'theirs' }, 'GET')), 'acting_tenant_forbidden')
  t.equal(await errorCode(resolve(PARENT, { kind: 'id', id: UNKNOWN }, 'GET')), 'acting_tenant_forbidden', 'unknown')
  t.equal(await errorCode(resolve(PARENT, { kind: 'ext', externalId: 'nope' }, 'GET')), 'acting_tenant_forbidden')
  t.equal(
    await errorCode(resolve(PARENT, { kind: 'ext', externalId: 'parent-ext' }, 'GET')),
    'acting_tenant_forbidden',
    'ext: names sub-accounts only',
  )
  // Its own UUID names no sub-account of it: a parent names itself as `self` only.
  t.equal(
    await errorCode(resolve(PARENT, { kind: 'id', id: PARENT }, 'POST')),
    'acting_tenant_forbidden',
    'its own UUID',
  )
})

t.test('sub-account key', async (t) => {
  t.equal((await resolve(ACTIVE, { kind: 'id', id: ACTIVE }, 'POST')).id, ACTIVE, 'its own UUID')
  t.equal((await resolve(ACTIVE, { kind: 'ext', externalId: 'eu' }, 'POST')).id, ACTIVE, 'its own ext:')
  for (const target of [
    { kind: 'id', id: PARENT },
    { kind: 'id', id: DEACTIVATED },
    { kind: 'id', id: FOREIGN },
    { kind: 'id', id: UNKNOWN },
    { kind: 'ext', externalId: 'old' },
    { kind: 'ext', externalId: 'parent-ext' },
  ] as ActingTarget[]) {
    t.equal(await errorCode(resolve(ACTIVE, target, 'GET')), 'acting_tenant_forbidden', JSON.stringify(target))
  }
})
