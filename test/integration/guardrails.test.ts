// Guardrails (docs/api.md, Key policies and IP allow-lists): the operator's scope ceiling and a
// sub-account's key policy at mint and roll, and IP allow-lists over real sockets, IPv4 and IPv6,
// with X-Forwarded-For believed only from a trusted proxy.
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { startGateway, type TestGateway } from '../helpers/gateway.js'
import { callAs, type RawResponse, rawRequest } from '../helpers/http.js'
import type { JsonBody } from '../helpers/json.js'
import { runCliHere } from '../helpers/cli.js'
import { TEST_ENCRYPTION_KEY } from '../helpers/encryption-key.js'
import { tokenRequest } from '../helpers/tokens.js'
import type { TestLike } from '../helpers/test-like.js'
import { startUpstream } from '../helpers/upstream.js'

const upstream = await startUpstream(t)
const ROUTES = { routes: [{ prefix: '/orders', upstream: upstream.url }] }
const PARENT_SCOPES = ['sub_accounts:read', 'sub_accounts:write', 'orders:read']

async function manage(
  gw: TestGateway,
  key: string,
  method: string,
  path: string,
  json?: unknown,
): Promise<RawResponse> {
  return callAs(gw.url, key, { method, path: `/v1/sub-accounts${path}`, acting: 'self', json })
}

async function created(res: RawResponse): Promise<JsonBody> {
  if (res.status !== 201) throw new Error(`${res.status} ${res.body}`)
  return res.json()
}

const inHours = (hours: number) => new Date(Date.now() + hours * 3_600_000).toISOString()

t.test("the operator's scope ceiling: minting and rolling outside it refused, nothing written", async (t) => {
  const gw = await startGateway(t, { gatewayConfig: ROUTES })
  const parent = await gw.createParent({ scopes: PARENT_SCOPES })
  const sub = (await created(await manage(gw, parent.apiKey, 'POST', '', { name: 'customer' }))).id as string
  // Minted before the ceiling: rolling it later is refused.
  const early = await created(
    await manage(gw, parent.apiKey, 'POST', `/${sub}/api-keys`, { name: 'early', scopes: ['orders:write'] }),
  )
  const cli = await runCliHere(['accounts', 'scopes', '--account', parent.id, '--allow', 'orders:read,tracking:*'], {
    DATABASE_URL: gw.database.url,
    ENCRYPTION_KEY: TEST_ENCRYPTION_KEY,
  })
  t.equal(cli.code, 0, cli.stderr)
  t.same(JSON.parse(cli.stdout).account.allowed_scopes, ['orders:read', 'tracking:*'])
  const audit = async () =>
    (await manage(gw, parent.apiKey, 'GET', '/events?type=account.scopes_updated')).json().data as JsonBody[]
  const [changed, ...more] = await audit()
  t.same(more, [], 'one event')
  t.match(changed, {
    actor: { type: 'operator' },
    target: { type: 'account', id: parent.id },
    data: {
      object: { id: parent.id, allowed_scopes: ['orders:read', 'tracking:*'] },
      previous: { allowed_scopes: null },
    },
  })
  const again = await runCliHere(['accounts', 'scopes', '--account', parent.id, '--allow', 'orders:read,tracking:*'], {
    DATABASE_URL: gw.database.url,
    ENCRYPTION_KEY: TEST_ENCRYPTION_KEY,
  })
  t.equal(again.code, 0)
  t.equal((await audit()).length, 1, 'the same ceiling again: no event')

  for (const scopes of [['orders:write'], ['orders:*'], ['orders:read', 'billing:read'], ['tracking']]) {
    const res = await manage(gw, parent.apiKey, 'POST', `/${sub}/api-keys`, { name: 'too much', scopes })
    t.equal(res.status, 400, `${scopes}: 400`)
    t.equal(res.json().code, 'validation_failed')
    t.match(
      res.json().errors[0].message,
      /is outside the scopes the operator allows this account \(orders:read, tracking:\*\)/,
    )
  }
  for (const scopes of [['orders:read'], ['tracking:read', 'tracking:write'], ['tracking:*']])
    t.equal(
      (await manage(gw, parent.apiKey, 'POST', `/${sub}/api-keys`, { name: 'ok', scopes })).status,
      201,
      `${scopes}`,
    )

  const roll = await manage(gw, parent.apiKey, 'POST', `/${sub}/api-keys/${early.id}/roll`, {})
  t.equal(roll.status, 400, 'a key outside the ceiling is not rolled')
  t.match(roll.json().errors[0], { path: '/scopes/0', message: /orders:write is outside.*mint a new key within them/ })
  const keys = (await manage(gw, parent.apiKey, 'GET', `/${sub}/api-keys`)).json().data as JsonBody[]
  t.equal(keys.length, 4, 'the roll minted nothing')
  t.equal(keys.find((k) => k.id === early.id)!.status, 'active', 'and left the old key as it was')

  const lifted = await runCliHere(['accounts', 'scopes', '--account', parent.id, '--any'], {
    DATABASE_URL: gw.database.url,
    ENCRYPTION_KEY: TEST_ENCRYPTION_KEY,
  })
  t.equal(lifted.code, 0)
  t.equal((await manage(gw, parent.apiKey, 'POST', `/${sub}/api-keys/${early.id}/roll`, {})).status, 201)

  for (const args of [['--any', '--allow', 'a'], [], ['--allow', 'Not A Scope'], ['--allow', 'a,sub_accounts:read']]) {
    const bad = await runCliHere(['accounts', 'scopes', '--account', parent.id, ...args], {
      DATABASE_URL: gw.database.url,
      ENCRYPTION_KEY: TEST_ENCRYPTION_KEY,
    })
    t.equal(bad.code, 1, `${args.join(' ')}: refused`)
    t.match(bad.stderr, /--allow|--any/)
  }
})

t.test('a key policy: scopes and life at mint and roll; tightened later', async (t) => {
  const gw = await startGateway(t, { gatewayConfig: ROUTES })
  const parent = await gw.createParent({ scopes: PARENT_SCOPES })
  const made = await created(
    await manage(gw, parent.apiKey, 'POST', '', {
      name: 'policed',
      key_policy: { allowed_scopes: ['orders:read', 'tracking:*'], max_ttl_seconds: 7200 },
    }),
  )
  t.same(made.key_policy, { allowed_scopes: ['orders:read', 'tracking:*'], max_ttl_seconds: 7200, ip_allowlist: null })
  const sub = made.id as string
  const mint = (body: JsonBody) => manage(gw, parent.apiKey, 'POST', `/${sub}/api-keys`, { name: 'k', ...body })

  const outside = await mint({ scopes: ['orders:write'], expires_at: inHours(1) })
  t.equal(outside.status, 400)
  t.match(outside.json().errors[0], { path: '/body/scopes/0', message: /key_policy\.allowed_scopes/ })
  const forever = await mint({ scopes: ['orders:read'] })
  t.equal(forever.status, 400)
  t.match(forever.json().errors[0], { path: '/body/expires_at', message: /is required.*max_ttl_seconds is 7200/ })
  const tooLong = await mint({ scopes: ['orders:read'], expires_at: inHours(3) })
  t.equal(tooLong.status, 400)
  t.match(tooLong.json().errors[0].message, /more than key_policy\.max_ttl_seconds \(7200\) ahead/)
  const within = await created(await mint({ scopes: ['tracking:read'], expires_at: inHours(1) }))
  t.equal(within.status, 'active')

  // Tightened: the keys already minted keep their scopes and life (and work) ...
  const loose = await created(await mint({ scopes: ['orders:read'], expires_at: inHours(1.5) }))
  const patched = await manage(gw, parent.apiKey, 'PATCH', `/${sub}`, {
    key_policy: { allowed_scopes: ['tracking:*'], max_ttl_seconds: 600 },
  })
  t.equal(patched.status, 200)
  t.same(patched.json().key_policy, { allowed_scopes: ['tracking:*'], max_ttl_seconds: 600, ip_allowlist: null })
  t.equal(
    (await callAs(gw.url, loose.api_key as string, { path: '/orders/1' })).status,
    200,
    'an existing key works on',
  )
  // ... but a roll is a new key: within the policy, or refused.
  const roll = await manage(gw, parent.apiKey, 'POST', `/${sub}/api-keys/${loose.id}/roll`, {})
  t.equal(roll.status, 400, 'outside the tightened scopes: not rolled')
  const rolled = await created(await manage(gw, parent.apiKey, 'POST', `/${sub}/api-keys/${within.id}/roll`, {}))
  const latest = Date.now() + 600_000
  t.ok(Date.parse(rolled.expires_at as string) <= latest, 'its successor lives no longer than the policy allows')

  const cleared = await manage(gw, parent.apiKey, 'PATCH', `/${sub}`, { key_policy: null })
  t.same(cleared.json().key_policy, { allowed_scopes: null, max_ttl_seconds: null, ip_allowlist: null })
  t.equal((await mint({ scopes: ['orders:write'] })).status, 201, 'no policy: any scope, no expiry needed')

  for (const [policy, path] of [
    [{ ip_allowlist: ['10.0.0.0/33'] }, '/body/key_policy/ip_allowlist/0'],
    [{ ip_allowlist: ['127.0.0.1', 'example.com'] }, '/body/key_policy/ip_allowlist/1'],
    [{ max_ttl_seconds: 10 }, '/body/key_policy/max_ttl_seconds'],
    [{ allowed_scopes: [] }, '/body/key_policy/allowed_scopes'],
    [{ allowed_scopes: ['orders:read', 'sub_accounts:read'] }, '/body/key_policy/allowed_scopes/1'],
    [{ colour: 'blue' }, '/body/key_policy/colour'],
  ] as const) {
    const res = await manage(gw, parent.apiKey, 'PATCH', `/${sub}`, { key_policy: policy })
    t.equal(res.status, 400, JSON.stringify(policy))
    t.equal(res.json().errors[0].path, path)
  }
  t.same(
    (await manage(gw, parent.apiKey, 'GET', `/${sub}`)).json().key_policy,
    { allowed_scopes: null, max_ttl_seconds: null, ip_allowlist: null },
    'a refused change changed nothing',
  )
})

/** A gateway on every address (IPv4 and IPv6), as a dual-stack listener sees its clients. */
async function dualStack(t: TestLike, env: Record<string, string> = {}): Promise<{ gw: TestGateway; port: number }> {
  const gw = await startGateway(t, { gatewayConfig: ROUTES, listen: false, env })
  await gw.app.listen({ port: 0, host: '::' })
  return { gw, port: (gw.app.server.address() as AddressInfo).port }
}

t.test('IP allow-lists of a key and of a policy, IPv4 and IPv6, proxy and token endpoint', async (t) => {
  const { gw, port } = await dualStack(t)
  const v4 = `http://127.0.0.1:${port}`
  const v6 = `http://[::1]:${port}`
  const parent = await gw.createParent({ scopes: PARENT_SCOPES })
  const sub = (await created(await manage({ ...gw, url: v4 }, parent.apiKey, 'POST', '', { name: 'walled' })))
    .id as string
  const mint = async (ipAllowlist: string[] | null) =>
    created(
      await manage({ ...gw, url: v4 }, parent.apiKey, 'POST', `/${sub}/api-keys`, {
        name: 'k',
        scopes: ['orders:read'],
        ip_allowlist: ipAllowlist,
      }),
    )
  const get = (base: string, key: string, localAddress?: string) =>
    rawRequest(base, { path: '/orders/1', headers: [['Authorization', `Bearer ${key}`]], localAddress })

  const only2 = await mint(['127.0.0.2'])
  t.same(only2.ip_allowlist, ['127.0.0.2'])
  const refused = await get(v4, only2.api_key as string)
  t.equal(refused.status, 403)
  t.match(refused.json(), { code: 'ip_not_allowed', detail: /127\.0\.0\.1 .*the key's ip_allowlist/ })
  t.equal((await get(v4, only2.api_key as string, '127.0.0.2')).status, 200, 'from its address')
  t.equal((await get(v6, only2.api_key as string)).status, 403, 'IPv6 ::1 is not 127.0.0.2')

  const v6only = await mint(['::1/128'])
  t.equal((await get(v6, v6only.api_key as string)).status, 200, 'IPv6 within its list')
  t.equal((await get(v4, v6only.api_key as string)).status, 403, 'IPv4 is not ::1')
  const loopback = await mint(['127.0.0.0/8'])
  t.equal((await get(v4, loopback.api_key as string, '127.0.0.3')).status, 200, 'an IPv4-mapped client in a CIDR')

  const refusedRaw = await manage({ ...gw, url: v4 }, parent.apiKey, 'POST', `/${sub}/api-keys`, {
    name: 'k',
    scopes: ['orders:read'],
    ip_allowlist: ['127.0.0.1', '300.1.1.1'],
  })
  t.equal(refusedRaw.status, 400)
  t.equal(refusedRaw.json().errors[0].path, '/body/ip_allowlist/1')
  // An IPv6 range holding ::ffff:0:0/96 would let every IPv4 client in: refused, as is a zone.
  for (const [entry, message] of [
    ['::/0', /every IPv4 client/],
    ['fe80::%eth0/64', /zone/],
  ] as const) {
    const refused = await manage({ ...gw, url: v4 }, parent.apiKey, 'POST', `/${sub}/api-keys`, {
      name: 'k',
      scopes: ['orders:read'],
      ip_allowlist: [entry],
    })
    t.equal(refused.status, 400, `${entry} refused`)
    t.match(refused.json().errors[0], { path: '/body/ip_allowlist/0', message }, `${entry}: says why`)
  }

  // The token endpoint: the client proves its secret, then its address is checked.
  const token = (localAddress?: string) =>
    tokenRequest(v4, {
      form: {
        grant_type: 'client_credentials',
        client_id: only2.id as string,
        client_secret: only2.client_secret as string,
      },
      ...(localAddress === undefined ? {} : { localAddress }),
    })
  const tokenRefused = await token()
  t.equal(tokenRefused.status, 403)
  t.match(tokenRefused.json(), { error: 'unauthorized_client', error_description: /^ip_not_allowed: / })
  t.equal((await token('127.0.0.2')).status, 200)

  // A policy's list applies at once to every key of the sub-account, those already minted too.
  const open = await mint(null)
  t.equal((await get(v4, open.api_key as string)).status, 200)
  const patched = await manage({ ...gw, url: v4 }, parent.apiKey, 'PATCH', `/${sub}`, {
    key_policy: { ip_allowlist: ['127.0.0.5'] },
  })
  t.equal(patched.status, 200)
  const nowRefused = await get(v4, open.api_key as string)
  t.equal(nowRefused.status, 403, 'the policy reached a key minted before it')
  t.match(nowRefused.json().detail, /sub-account's key_policy\.ip_allowlist/)
  t.equal((await get(v4, open.api_key as string, '127.0.0.5')).status, 200)
  t.equal((await get(v4, only2.api_key as string, '127.0.0.2')).status, 403, 'both lists must allow the address')
})

t.test('X-Forwarded-For is believed from a trusted proxy only', async (t) => {
  const { gw, port } = await dualStack(t, { TRUSTED_PROXIES: '127.0.0.1' })
  const base = `http://127.0.0.1:${port}`
  const parent = await gw.createParent({ scopes: PARENT_SCOPES })
  const sub = (await created(await manage({ ...gw, url: base }, parent.apiKey, 'POST', '', { name: 'behind' }))).id
  const key = await created(
    await manage({ ...gw, url: base }, parent.apiKey, 'POST', `/${sub}/api-keys`, {
      name: 'k',
      scopes: ['orders:read'],
      ip_allowlist: ['203.0.113.0/24'],
    }),
  )
  const get = (forwardedFor: string, localAddress?: string) =>
    rawRequest(base, {
      path: '/orders/1',
      headers: [
        ['Authorization', `Bearer ${key.api_key}`],
        ['X-Forwarded-For', forwardedFor],
      ],
      localAddress,
    })
  t.equal((await get('203.0.113.9')).status, 200, 'from the trusted proxy: the client it names')
  t.equal((await get('203.0.113.9, 198.51.100.1')).status, 403, 'the right-most untrusted address counts')
  t.equal((await get('203.0.113.9', '127.0.0.2')).status, 403, 'from anyone else: the header is ignored')

  const untrusting = await dualStack(t)
  const parent2 = await untrusting.gw.createParent({ scopes: PARENT_SCOPES })
  const base2 = `http://127.0.0.1:${untrusting.port}`
  const sub2 = (
    await created(await manage({ ...untrusting.gw, url: base2 }, parent2.apiKey, 'POST', '', { name: 's' }))
  ).id
  const key2 = await created(
    await manage({ ...untrusting.gw, url: base2 }, parent2.apiKey, 'POST', `/${sub2}/api-keys`, {
      name: 'k',
      scopes: ['orders:read'],
      ip_allowlist: ['203.0.113.0/24'],
    }),
  )
  const spoofed = await rawRequest(base2, {
    path: '/orders/1',
    headers: [
      ['Authorization', `Bearer ${key2.api_key}`],
      ['X-Forwarded-For', '203.0.113.9'],
    ],
  })
  t.equal(spoofed.status, 403, 'no trusted proxy (the default): X-Forwarded-For changes nothing')
})
