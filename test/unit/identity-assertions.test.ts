// The cache of identity assertions (src/identity/assertions.ts) on its own: what a
// principal object that outlives a change still gets, the bound, the names it ignores, and a
// signing that fails. The gateway's behaviour end to end is test/integration/identity.test.ts.
import { decodeJwt } from 'jose'
import t from 'tap'
import type { Principal } from '../../src/auth/principal.js'
import { IdentityAssertions } from '../../src/identity/assertions.js'
import { generateSigningKey, Keyring } from '../../src/signing-keys/keyring.js'
import { Tally } from '../../src/shared/fast-metrics.js'
import type { TenantRecord } from '../../src/shared/tenancy-records.js'

const ROUTE = { audience: 'https://things.internal', ttlSeconds: 60 }
const PARENT = '11111111-1111-4111-8111-111111111111'

function tenant(id: string, parentId: string | null = PARENT): TenantRecord {
  return { id, parentId, externalId: null, status: 'active' }
}

function principal(keyId: string, owner: TenantRecord, scopes: string[] = ['a:read']): Principal {
  return { key: { id: keyId, tenantId: owner.id, scopes, status: 'active' }, tenant: owner }
}

async function setup(maxEntries?: number) {
  const keyring = await Keyring.ephemeral()
  const signatures = new Tally()
  const assertions = new IdentityAssertions({ keyring, issuer: 'https://gw', signatures, maxEntries })
  const assertionFor = assertions.forRoute(ROUTE)
  const token = async (p: Principal, acting: TenantRecord) => assertionFor(p, acting)
  return { keyring, signatures, assertions, token }
}

t.test('a principal object kept across a change still gets a new assertion', async (t) => {
  const { assertions, signatures, token } = await setup()
  const parent = tenant(PARENT, null)
  const sub = tenant('22222222-2222-4222-8222-222222222222')
  // One object for every request, as a long-lived admission would hand over.
  const caller = principal('33333333-3333-4333-8333-333333333333', parent)
  const first = await token(caller, sub)
  t.equal(await token(caller, sub), first, 'reused')
  t.equal(signatures.pending, 1)

  assertions.evicted([`tenant:${sub.id}`])
  const second = await token(caller, sub)
  t.not(second, first, 'the resolved tenant changed: a new one')
  assertions.evicted([`sub:${PARENT}:${sub.id}`])
  const third = await token(caller, sub)
  t.not(third, second, 'the sub-account as its parent names it changed: a new one')
  assertions.evicted([`tenant:${PARENT}`])
  const fourth = await token(caller, sub)
  t.not(fourth, third, 'the caller tenant changed: a new one')
  assertions.evicted([`keyid:${caller.key.id}`])
  const fifth = await token(caller, sub)
  t.not(fifth, fourth, 'the key changed: a new one')
  assertions.evicted(null)
  t.equal(assertions.size, 0, "the tenancy cache's loss of trust: all dropped")
  t.not(await token(caller, sub), fifth, 'a new one')
  t.equal(signatures.pending, 6, 'one signature each')
})

t.test('one principal object acting as two tenants by turns: each gets its own', async (t) => {
  const { signatures, token } = await setup()
  const parent = tenant(PARENT, null)
  const sub = tenant('22222222-2222-4222-8222-222222222222')
  const caller = principal('33333333-3333-4333-8333-333333333333', parent)
  const asSub = await token(caller, sub)
  const asSelf = await token(caller, parent)
  t.equal(decodeJwt(asSub).sub, sub.id)
  t.equal(decodeJwt(asSelf).sub, parent.id)
  t.equal(await token(caller, sub), asSub, 'the first again, still cached')
  t.equal(await token(caller, parent), asSelf)
  t.equal(signatures.pending, 2)
})

t.test('names of other entries drop nothing', async (t) => {
  const { assertions, signatures, token } = await setup()
  const sub = tenant('22222222-2222-4222-8222-222222222222')
  const caller = principal('33333333-3333-4333-8333-333333333333', sub)
  const first = await token(caller, sub)
  assertions.evicted([
    `key:${'ab'.repeat(32)}`,
    `ext:${PARENT}:acme`,
    `anyActive:${PARENT}`,
    'keyid:44444444-4444-4444-8444-444444444444',
    'tenant:55555555-5555-4555-8555-555555555555',
  ])
  t.equal(assertions.size, 1)
  t.equal(await token(principal(caller.key.id, sub), sub), first, 'the same, for a new principal object too')
  t.equal(signatures.pending, 1)
})

t.test('bounded: the least recently used is pushed out, and its indexes with it', async (t) => {
  const { assertions, signatures, token } = await setup(3)
  const owner = tenant('22222222-2222-4222-8222-222222222222')
  const callers = ['a', 'b', 'c', 'd'].map((letter) =>
    principal(`${letter.repeat(8)}-0000-4000-8000-000000000000`, owner),
  )
  const first = await token(callers[0]!, owner)
  for (const caller of callers.slice(1)) await token(caller, owner)
  t.equal(assertions.size, 3, 'at most 3')
  t.not(await token(callers[0]!, owner), first, 'the first was pushed out: signed anew, though its object is the same')
  t.equal(signatures.pending, 5)
  // Bringing the first back pushed out the next least recently used, b's.
  assertions.evicted([`keyid:${callers[1]!.key.id}`])
  t.equal(assertions.size, 3, "b's key: nothing left to drop")
  assertions.evicted([`keyid:${callers[2]!.key.id}`])
  t.equal(assertions.size, 2, "c's key: c's dropped")
})

t.test(
  'different scopes of one key and tenant (an access token narrower than its key): different assertions',
  async (t) => {
    const { token } = await setup()
    const owner = tenant('22222222-2222-4222-8222-222222222222')
    const wide = principal('33333333-3333-4333-8333-333333333333', owner, ['a:read', 'a:write'])
    const narrow = principal(wide.key.id, owner, ['a:read'])
    t.equal(decodeJwt(await token(wide, owner)).scope, 'a:read a:write')
    t.equal(decodeJwt(await token(narrow, owner)).scope, 'a:read')
    t.equal(decodeJwt(await token(wide, owner)).scope, 'a:read a:write', 'each keeps its own')
  },
)

t.test('no signing key: the request fails, and the next one is signed once there is one', async (t) => {
  const { keyring, signatures, token } = await setup()
  const owner = tenant('22222222-2222-4222-8222-222222222222')
  const caller = principal('33333333-3333-4333-8333-333333333333', owner)
  await keyring.replace([await generateSigningKey(Date.now() + 60_000)])
  await t.rejects(token(caller, owner), /no signing key is loaded yet/, 'refused, not sent unsigned')
  t.equal(signatures.pending, 0)
  await keyring.replace([await generateSigningKey(0)])
  t.ok(decodeJwt(await token(caller, owner)).sub, 'signed once a key is active')
})
