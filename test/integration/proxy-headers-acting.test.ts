// The proxy over real sockets: the acting header (docs/api.md) on every proxied method, as parent
// and sub-account keys, for every kind of target and value. Every outcome is checked on what a
// recording upstream actually got: the trusted identity on a success, nothing at all on a refusal.
// The identity checks and setup calls: test/helpers/proxy-identity.ts.
import t from 'tap'
import { generateApiKey } from '../../src/auth/key-format.js'
import { startGateway } from '../helpers/gateway.js'
import { sha256 } from '../helpers/http.js'
import { checkProblem } from '../helpers/problems.js'
import { startUpstream } from '../helpers/upstream.js'
import { checkIdentity, createSub, type Identity, keyIdOf, manage, type Method } from '../helpers/proxy-identity.js'
import { METHODS, mintSubKey, PARENT_SCOPES, proxied } from '../helpers/proxy-identity.js'

const upstream = await startUpstream(t)
const gw = await startGateway(t, { upstreamUrl: upstream.url })

// A parent with active sub-accounts, one without any, one whose only sub-account is deactivated,
// and a stranger with a sub-account of its own.
const owner = await gw.createParent()
const lonely = await gw.createParent()
const retired = await gw.createParent()
const stranger = await gw.createParent()
const ownerKeyId = await keyIdOf(gw, owner.id)
const lonelyKeyId = await keyIdOf(gw, lonely.id)
const retiredKeyId = await keyIdOf(gw, retired.id)

const active = await createSub(gw, owner, 'Acme EU', 'acme-eu')
const sibling = await createSub(gw, owner, 'Acme US', 'acme-us')
const gone = await createSub(gw, owner, 'Gone', 'gone')
const foreign = await createSub(gw, stranger, 'Foreign', 'foreign-only')
const retiredSub = await createSub(gw, retired, 'Retired', 'retired')

const activeKey = await mintSubKey(gw, owner, active.id, ['tracking:read', 'tracking:write'])
const goneKey = await mintSubKey(gw, owner, gone.id, ['tracking:read'])
const revokedKey = await mintSubKey(gw, owner, active.id, ['tracking:read'])
await manage(gw, owner, 'POST', `/v1/sub-accounts/${gone.id}/deactivate`)
await manage(gw, retired, 'POST', `/v1/sub-accounts/${retiredSub.id}/deactivate`)

// The key to be revoked works first (so that it is cached), then is revoked through the API; the
// rows below run after it, as tap runs a file's top-level tests in order.
t.test('a key works, then is revoked through the API', async (t) => {
  const beforeRevoke = await proxied(gw, revokedKey.api_key, 'GET', '/warm', undefined).sent
  t.equal(beforeRevoke.status, 200, 'the soon-revoked key works before the revoke')
  await manage(gw, owner, 'POST', `/v1/sub-accounts/${active.id}/api-keys/${revokedKey.id}/revoke`)
})

const asOwner: Identity = { resolved: owner.id, caller: owner.id, keyId: ownerKeyId, scopes: PARENT_SCOPES }
const ownerAsActive: Identity = { ...asOwner, resolved: active.id }
const asLonely: Identity = { resolved: lonely.id, caller: lonely.id, keyId: lonelyKeyId, scopes: PARENT_SCOPES }
const asRetired: Identity = { resolved: retired.id, caller: retired.id, keyId: retiredKeyId, scopes: PARENT_SCOPES }
const asActive: Identity = {
  resolved: active.id,
  caller: active.id,
  keyId: activeKey.id,
  scopes: 'tracking:read tracking:write',
}
const unknownUuid = '00000000-0000-4000-8000-000000000000'
const validKey = generateApiKey().apiKey
const badChecksum = owner.apiKey.slice(0, -1) + (owner.apiKey.endsWith('a') ? 'b' : 'a')

type Outcome = Identity | { status: number; code: string; wwwAuthenticate?: string }
interface Row {
  name: string
  key: string | null
  acting?: string | string[]
  extra?: [string, string][]
  outcome: (method: Method) => Outcome
}
const always = (outcome: Outcome) => () => outcome
const refusal = (status: number, code: string) => always({ status, code })
const unauthenticated = always({ status: 401, code: 'unauthenticated', wwwAuthenticate: 'Bearer' })
const malformed = refusal(400, 'acting_tenant_malformed')
const forbidden = refusal(403, 'acting_tenant_forbidden')

// The rows, by outcome: each row runs on every proxied method.
const groups: { outcome: string; rows: Row[] }[] = [
  {
    outcome: 'absent, or self: the caller itself, unless a parent with sub-accounts writes',
    rows: [
      { name: 'parent with no sub-account, no header', key: lonely.apiKey, outcome: always(asLonely) },
      { name: 'parent with no sub-account, self', key: lonely.apiKey, acting: 'self', outcome: always(asLonely) },
      {
        name: 'parent whose only sub-account is deactivated, no header',
        key: retired.apiKey,
        outcome: always(asRetired),
      },
      {
        name: 'parent with active sub-accounts, no header',
        key: owner.apiKey,
        outcome: (method) => (method === 'GET' ? asOwner : { status: 400, code: 'acting_tenant_required' }),
      },
      { name: 'parent with active sub-accounts, self', key: owner.apiKey, acting: 'self', outcome: always(asOwner) },
    ],
  },
  {
    outcome: 'a parent acting as its own sub-account, by UUID in any case or by ext:',
    rows: [
      {
        name: 'parent acting as its active sub-account by UUID',
        key: owner.apiKey,
        acting: active.id,
        outcome: always(ownerAsActive),
      },
      {
        name: 'parent acting as its active sub-account by upper-case UUID',
        key: owner.apiKey,
        acting: active.id.toUpperCase(),
        outcome: always(ownerAsActive),
      },
      {
        name: 'parent acting as its active sub-account by ext:',
        key: owner.apiKey,
        acting: 'ext:acme-eu',
        outcome: always(ownerAsActive),
      },
    ],
  },
  {
    outcome: "not its sub-account: 403 acting_tenant_forbidden, one answer for unknown and another parent's",
    rows: [
      {
        name: "parent naming another parent's sub-account by UUID",
        key: owner.apiKey,
        acting: foreign.id,
        outcome: forbidden,
      },
      {
        name: "parent naming another parent's sub-account by ext:",
        key: owner.apiKey,
        acting: 'ext:foreign-only',
        outcome: forbidden,
      },
      { name: 'parent naming another parent', key: owner.apiKey, acting: stranger.id, outcome: forbidden },
      { name: 'parent naming an unknown UUID', key: owner.apiKey, acting: unknownUuid, outcome: forbidden },
      { name: 'parent naming an unknown ext:', key: owner.apiKey, acting: 'ext:nobody', outcome: forbidden },
    ],
  },
  {
    outcome: "a parent's own UUID is no sub-account of it (it names itself as self only): 403",
    rows: [
      { name: 'parent naming its own UUID', key: owner.apiKey, acting: owner.id, outcome: forbidden },
      {
        name: 'parent naming its own UUID in upper case',
        key: owner.apiKey,
        acting: owner.id.toUpperCase(),
        outcome: forbidden,
      },
      {
        name: 'parent with no sub-account naming its own UUID',
        key: lonely.apiKey,
        acting: lonely.id,
        outcome: forbidden,
      },
      {
        name: 'parent with no sub-account naming an unknown UUID',
        key: lonely.apiKey,
        acting: unknownUuid,
        outcome: forbidden,
      },
    ],
  },
  {
    outcome: 'a deactivated target: 403 acting_tenant_deactivated',
    rows: [
      {
        name: 'parent acting as its deactivated sub-account by UUID',
        key: owner.apiKey,
        acting: gone.id,
        outcome: refusal(403, 'acting_tenant_deactivated'),
      },
      {
        name: 'parent acting as its deactivated sub-account by ext:',
        key: owner.apiKey,
        acting: 'ext:gone',
        outcome: refusal(403, 'acting_tenant_deactivated'),
      },
    ],
  },
  {
    outcome: 'a sub-account key: itself only, never its parent or a sibling',
    rows: [
      { name: 'sub-account key, no header (never required)', key: activeKey.api_key, outcome: always(asActive) },
      { name: 'sub-account key, self', key: activeKey.api_key, acting: 'self', outcome: always(asActive) },
      { name: 'sub-account key, its own UUID', key: activeKey.api_key, acting: active.id, outcome: always(asActive) },
      {
        name: 'sub-account key, its own UUID in upper case',
        key: activeKey.api_key,
        acting: active.id.toUpperCase(),
        outcome: always(asActive),
      },
      {
        name: 'sub-account key, its own ext:',
        key: activeKey.api_key,
        acting: 'ext:acme-eu',
        outcome: always(asActive),
      },
      { name: 'sub-account key naming its parent', key: activeKey.api_key, acting: owner.id, outcome: forbidden },
      {
        name: 'sub-account key naming a sibling by UUID',
        key: activeKey.api_key,
        acting: sibling.id,
        outcome: forbidden,
      },
      {
        name: 'sub-account key naming a sibling by ext:',
        key: activeKey.api_key,
        acting: 'ext:acme-us',
        outcome: forbidden,
      },
      {
        name: 'sub-account key naming an unknown UUID',
        key: activeKey.api_key,
        acting: unknownUuid,
        outcome: forbidden,
      },
      {
        name: "sub-account key naming another parent's sub-account",
        key: activeKey.api_key,
        acting: foreign.id,
        outcome: forbidden,
      },
    ],
  },
  {
    outcome: "a deactivated sub-account's own key: 403 tenant_deactivated",
    rows: [
      {
        name: "deactivated sub-account's key, no header",
        key: goneKey.api_key,
        outcome: refusal(403, 'tenant_deactivated'),
      },
      {
        name: "deactivated sub-account's key, self",
        key: goneKey.api_key,
        acting: 'self',
        outcome: refusal(403, 'tenant_deactivated'),
      },
      {
        name: "deactivated sub-account's key, a malformed header is still 400",
        key: goneKey.api_key,
        acting: 'SELF',
        outcome: malformed,
      },
    ],
  },
  {
    outcome: 'malformed values: 400 acting_tenant_malformed',
    rows: [
      { name: 'empty value', key: owner.apiKey, acting: '', outcome: malformed },
      { name: 'sent twice (two header lines)', key: owner.apiKey, acting: ['self', 'self'], outcome: malformed },
      { name: 'sent twice, the second empty', key: owner.apiKey, acting: ['self', ''], outcome: malformed },
      {
        name: 'sent twice by a parent with no sub-account',
        key: lonely.apiKey,
        acting: ['self', 'self'],
        outcome: malformed,
      },
      { name: 'comma-joined', key: owner.apiKey, acting: 'self, self', outcome: malformed },
      {
        name: 'comma-joined self and a sub-account',
        key: owner.apiKey,
        acting: `self,${active.id}`,
        outcome: malformed,
      },
      { name: 'SELF', key: owner.apiKey, acting: 'SELF', outcome: malformed },
      { name: 'Self', key: owner.apiKey, acting: 'Self', outcome: malformed },
      { name: 'Ext:x', key: owner.apiKey, acting: 'Ext:x', outcome: malformed },
      { name: 'EXT:acme-eu', key: owner.apiKey, acting: 'EXT:acme-eu', outcome: malformed },
      { name: 'ext: with nothing after it', key: owner.apiKey, acting: 'ext:', outcome: malformed },
      { name: 'a UUID one character short', key: owner.apiKey, acting: active.id.slice(0, -1), outcome: malformed },
      { name: 'a UUID in braces', key: owner.apiKey, acting: `{${active.id}}`, outcome: malformed },
      { name: 'a UUID without dashes', key: owner.apiKey, acting: active.id.replaceAll('-', ''), outcome: malformed },
      { name: 'not a UUID at all', key: owner.apiKey, acting: '12345', outcome: malformed },
      { name: 'a sub-account key with a malformed value', key: activeKey.api_key, acting: 'Ext:x', outcome: malformed },
    ],
  },
  {
    outcome: 'authentication comes first: 401 unauthenticated',
    rows: [
      { name: 'no key', key: null, acting: 'self', outcome: unauthenticated },
      { name: 'no key and a malformed header', key: null, acting: 'SELF', outcome: unauthenticated },
      { name: 'an unknown, well-formed key', key: validKey, acting: 'self', outcome: unauthenticated },
      { name: 'a revoked key', key: revokedKey.api_key, outcome: unauthenticated },
      {
        name: 'a revoked key, acting as its own tenant',
        key: revokedKey.api_key,
        acting: 'self',
        outcome: unauthenticated,
      },
      { name: 'a malformed key', key: 'tgw_short', acting: 'self', outcome: unauthenticated },
      { name: 'a key with a bad checksum', key: badChecksum, outcome: unauthenticated },
      {
        name: 'another scheme',
        key: null,
        extra: [['Authorization', `Basic ${Buffer.from(`x:${owner.apiKey}`).toString('base64')}`]],
        outcome: unauthenticated,
      },
      {
        name: 'two Authorization headers',
        key: owner.apiKey,
        acting: 'self',
        extra: [['Authorization', `Bearer ${owner.apiKey}`]],
        outcome: unauthenticated,
      },
    ],
  },
]

for (const { outcome: group, rows } of groups) {
  t.test(group, async (t) => {
    for (const row of rows) {
      t.test(row.name, async (t) => {
        for (const method of METHODS) {
          const what = `${method} ${row.name}`
          const path = `/orders/42?m=${method}`
          const before = upstream.received.length
          const { sent, body } = proxied(gw, row.key, method, path, row.acting, row.extra)
          const res = await sent
          const outcome = row.outcome(method)
          if ('resolved' in outcome) {
            t.equal(res.status, 200, `${what}: 200 from the upstream (${res.body.slice(0, 200)})`)
            t.equal(upstream.received.length, before + 1, `${what}: the upstream got it once`)
            const got = upstream.received[upstream.received.length - 1]!
            t.equal(got.method, method, `${what}: method`)
            t.equal(got.url, path, `${what}: path and query`)
            t.equal(got.bodyBytes, body === undefined ? 0 : Buffer.byteLength(body), `${what}: body length`)
            if (body !== undefined) t.equal(got.bodySha256, sha256(body), `${what}: body bytes`)
            checkIdentity(t, got, outcome, what)
            t.equal(got.headers['x-request-id'], res.headers['x-request-id'], `${what}: the same request id both ways`)
          } else {
            checkProblem(t, res, outcome.status, outcome.code, what)
            if (outcome.wwwAuthenticate !== undefined) {
              t.equal(res.headers['www-authenticate'], outcome.wwwAuthenticate, `${what}: WWW-Authenticate`)
            }
            t.equal(upstream.received.length, before, `${what}: the upstream received nothing`)
          }
        }
      })
    }
  })
}

t.test('unknown and foreign targets get one and the same answer', async (t) => {
  const answers: Record<string, unknown>[] = []
  for (const acting of [unknownUuid, foreign.id, 'ext:nobody', 'ext:foreign-only', stranger.id]) {
    const res = await proxied(gw, owner.apiKey, 'POST', '/orders', acting).sent
    const { request_id: _id, ...rest } = checkProblem(t, res, 403, 'acting_tenant_forbidden', acting)
    answers.push(rest)
  }
  for (const answer of answers.slice(1)) t.same(answer, answers[0], 'same type, title, detail and code')
})
