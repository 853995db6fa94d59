// The sub-account portal's server side (docs/api.md, Portal sessions): sessions made, listed and
// ended by the parent; the link's one-time token exchanged once for a cookie or a bearer; the
// portal's API bound to one sub-account and its permissions, under the key policy and scope
// ceiling; the session refused everywhere else; its end reaching another replica within 1 s;
// audit events naming the session; a framed page given a session only where its parent allows.
import t from 'tap'
import { STORE_DEADLINES } from '../../src/store/deadlines.js'
import type { LightMyRequestResponse } from 'fastify'
import { runCliHere } from '../helpers/cli.js'
import { TEST_ENCRYPTION_KEY } from '../helpers/encryption-key.js'
import { type Parent, startGateway, startReplicas, type TestGateway } from '../helpers/gateway.js'
import type { JsonBody } from '../helpers/json.js'
import { eventually, sleep, until } from '../helpers/poll.js'
import { startUpstream } from '../helpers/upstream.js'
import { loadRouteTable } from '../../src/proxy/route-table.js'

const upstream = await startUpstream(t)
const ROUTES = { routes: [{ prefix: '/orders', upstream: upstream.url }] }
const ALL = ['keys:read', 'keys:write', 'usage:read', 'requests:read']

const manage = (gw: TestGateway, parent: Parent, method: string, path: string, body?: unknown) =>
  gw.call(parent.apiKey, { method: method as 'GET', url: `/v1/sub-accounts${path}`, body, acting: 'self' })

function ok(res: LightMyRequestResponse, status: number): JsonBody {
  if (res.statusCode !== status) throw new Error(`expected ${status}, got ${res.statusCode}: ${res.body}`)
  return res.body === '' ? null : res.json()
}

async function subAccount(gw: TestGateway, parent: Parent, body: JsonBody = {}): Promise<string> {
  return ok(await manage(gw, parent, 'POST', '', { name: 'customer', ...body }), 201).id
}

async function openSession(gw: TestGateway, parent: Parent, sub: string, body: JsonBody = {}) {
  const made = ok(await manage(gw, parent, 'POST', `/${sub}/portal-sessions`, { permissions: ALL, ...body }), 201)
  const token = (made.url as string).split('#')[1]!
  return { made, token }
}

/** The portal's API as the page calls it: with the cookie (or a bearer when embedded). */
const portal = (
  gw: TestGateway,
  auth: { cookie?: string; bearer?: string },
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
) =>
  gw.app.inject({
    method: method as 'GET',
    url: `/portal/api${path}`,
    headers: {
      ...(auth.cookie === undefined ? {} : { cookie: `tgw_portal=${auth.cookie}` }),
      ...(auth.bearer === undefined ? {} : { authorization: `Bearer ${auth.bearer}` }),
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      ...headers,
    },
    ...(body === undefined ? {} : { payload: JSON.stringify(body) }),
  })

/** The link's exchange: as a page in a window of its own, or framed by pages of `ancestors` (embedded). */
async function exchange(gw: TestGateway, token: string, ancestors?: string[], headers: Record<string, string> = {}) {
  return gw.app.inject({
    method: 'POST',
    url: '/portal/api/session',
    headers: { 'content-type': 'application/json', ...headers },
    payload: JSON.stringify({
      token,
      ...(ancestors === undefined ? {} : { embedded: true, ancestor_origins: ancestors }),
    }),
  })
}

/** The session cookie's value from an exchange's Set-Cookie. */
const cookieValue = (res: LightMyRequestResponse) => /^tgw_portal=([^;]+)/.exec(String(res.headers['set-cookie']))![1]!

t.test('create, list and delete; isolation between parents; validation', async (t) => {
  const gw = await startGateway(t, { env: { ISSUER_URL: 'https://gw.example' } })
  const [a, b] = [await gw.createParent(), await gw.createParent()]
  const sub = await subAccount(gw, a)
  const { made, token } = await openSession(gw, a, sub, {
    permissions: ['keys:read'],
    return_url: 'https://a.example/back',
  })
  t.match(made, {
    id: /^[0-9a-f-]{36}$/,
    sub_account_id: sub,
    permissions: ['keys:read'],
    return_url: 'https://a.example/back',
    link_used: false,
  })
  t.match(made.url, /^https:\/\/gw\.example\/portal\/#tgwpl_[0-9A-Za-z]{49}$/, '<ISSUER_URL>/portal/#<one-time token>')
  t.ok(Date.parse(made.expires_at) - Date.now() > 890_000, 'expires in 900 s by default')
  const stored = await gw.sql`select token_digest from portal_sessions where id = ${made.id}`
  t.not(stored[0]!.token_digest.toString(), token, 'the token is stored as a digest')

  const list = ok(await manage(gw, a, 'GET', `/${sub}/portal-sessions`), 200)
  t.same(
    list.data.map((s: JsonBody) => s.id),
    [made.id],
  )
  t.notOk('url' in list.data[0], 'the list never shows the link')

  t.test("another parent's sub-account and session are 404", async (t) => {
    t.equal((await manage(gw, b, 'POST', `/${sub}/portal-sessions`, { permissions: ALL })).statusCode, 404)
    t.equal((await manage(gw, b, 'GET', `/${sub}/portal-sessions`)).statusCode, 404)
    t.equal((await manage(gw, b, 'DELETE', `/${sub}/portal-sessions/${made.id}`)).statusCode, 404)
    const bSub = await subAccount(gw, b)
    t.equal((await manage(gw, b, 'DELETE', `/${bSub}/portal-sessions/${made.id}`)).statusCode, 404, 'by its own sub')
    t.equal((await manage(gw, a, 'DELETE', `/${sub}/portal-sessions/not-a-uuid`)).statusCode, 404)
  })

  t.test('validation', async (t) => {
    for (const body of [
      { permissions: [] },
      { permissions: ['keys:admin'] },
      { permissions: ['keys:read'], expires_in_seconds: 59 },
      { permissions: ['keys:read'], expires_in_seconds: 3601 },
      { permissions: ['keys:read'], return_url: 'http://a.example/' },
      { permissions: ['keys:read'], return_url: 'javascript:alert(1)' },
      { permissions: ['keys:read'], extra: 1 },
    ]) {
      const res = await manage(gw, a, 'POST', `/${sub}/portal-sessions`, body)
      t.equal(res.statusCode, 400, JSON.stringify(body))
      t.equal(res.json().code, 'validation_failed')
    }
  })

  t.test('a read-only parent key cannot make one', async (t) => {
    const res = await gw.call((await gw.createParent({ scopes: ['sub_accounts:read'] })).apiKey, {
      method: 'POST',
      url: `/v1/sub-accounts/${sub}/portal-sessions`,
      body: { permissions: ALL },
      acting: 'self',
    })
    t.equal(res.statusCode, 403)
    t.equal(res.json().code, 'insufficient_scope')
  })

  t.test('DELETE ends it: 204, again 204, gone from the list, the link refused; events', async (t) => {
    t.equal((await manage(gw, a, 'DELETE', `/${sub}/portal-sessions/${made.id}`)).statusCode, 204)
    t.equal((await manage(gw, a, 'DELETE', `/${sub}/portal-sessions/${made.id}`)).statusCode, 204, 'repeat')
    t.same(ok(await manage(gw, a, 'GET', `/${sub}/portal-sessions`), 200).data, [])
    t.equal((await exchange(gw, token)).statusCode, 401, 'the link of an ended session')
    const events = ok(await manage(gw, a, 'GET', `/events?target_id=${made.id}`), 200).data
    t.same(
      events.map((e: JsonBody) => e.type),
      ['portal_session.ended', 'portal_session.created'],
      'one event each, newest first',
    )
    t.match(events[1], { actor: { type: 'api_key', key_id: a.keyId }, target: { type: 'portal_session' } })
    t.match(events[0].data, { object: { id: made.id, ended_reason: 'deleted' }, previous: { ended_at: null } })
    t.notOk(JSON.stringify(events).includes(token), 'no event holds the token')
  })
})

t.test('the exchange: once, cookie attributes, bearer when embedded, expiry', async (t) => {
  const gw = await startGateway(t, { env: { ISSUER_URL: 'https://gw.example' } })
  const parent = await gw.createParent()
  const sub = await subAccount(gw, parent, { name: 'Acme' })
  const { made, token } = await openSession(gw, parent, sub, { permissions: ['keys:read'] })

  const first = await exchange(gw, token)
  t.equal(first.statusCode, 201, first.body)
  t.match(first.json(), { id: made.id, sub_account: { id: sub, name: 'Acme' }, permissions: ['keys:read'] })
  t.notOk('session_token' in first.json(), 'no token in the body: the cookie carries it')
  const setCookie = String(first.headers['set-cookie'])
  t.match(setCookie, /^tgw_portal=tgwps_[0-9A-Za-z]{49}; /)
  for (const attribute of ['Path=/portal/', 'HttpOnly', 'SameSite=Strict', 'Secure'])
    t.ok(setCookie.split('; ').includes(attribute), `${attribute} (${setCookie})`)
  const maxAge = Number(/Max-Age=(\d+)/.exec(setCookie)![1])
  t.ok(maxAge > 890 && maxAge <= 900, `Max-Age until expires_at (${maxAge})`)
  t.equal(first.headers['cache-control'], 'no-store')

  const second = await exchange(gw, token)
  t.equal(second.statusCode, 401, 'a link works once')
  t.match(second.json(), { code: 'unauthenticated', detail: /already been used/ })
  t.equal(second.headers['set-cookie'], undefined, 'no cookie the second time')

  const cookie = cookieValue(first)
  const me = await portal(gw, { cookie }, 'GET', '/session')
  t.equal(me.statusCode, 200, me.body)
  t.equal(me.json().id, made.id)
  t.ok(ok(await manage(gw, parent, 'GET', `/${sub}/portal-sessions`), 200).data[0].link_used, 'link_used')

  t.test('two exchanges at once: exactly one wins', async (t) => {
    const { token: raced } = await openSession(gw, parent, sub)
    const answers = await Promise.all(Array.from({ length: 8 }, () => exchange(gw, raced)))
    t.same(answers.map((r) => r.statusCode).sort(), [201, 401, 401, 401, 401, 401, 401, 401])
  })

  t.test('embedded: the session token in the body, no cookie; it works as a bearer', async (t) => {
    await gw.sql`update tenants set portal_origins = array['https://parent.example'] where id = ${parent.id}`
    const { token: other } = await openSession(gw, parent, sub)
    const res = await exchange(gw, other, ['https://parent.example'])
    t.equal(res.statusCode, 201, res.body)
    t.equal(res.headers['set-cookie'], undefined)
    const bearer = res.json().session_token
    t.match(bearer, /^tgwps_/)
    t.equal((await portal(gw, { bearer }, 'GET', '/keys')).statusCode, 200)
  })

  t.test('a cookie sent cross-site is refused even if a browser sent it', async (t) => {
    const res = await portal(gw, { cookie }, 'GET', '/keys', undefined, { 'sec-fetch-site': 'cross-site' })
    t.equal(res.statusCode, 403)
    t.equal(
      (await portal(gw, { cookie }, 'GET', '/keys', undefined, { 'sec-fetch-site': 'same-origin' })).statusCode,
      200,
    )
  })

  t.test('an exchange a browser says came from another site is refused, the link kept', async (t) => {
    const { token: fresh } = await openSession(gw, parent, sub)
    const res = await gw.app.inject({
      method: 'POST',
      url: '/portal/api/session',
      headers: { 'content-type': 'application/json', 'sec-fetch-site': 'cross-site' },
      payload: JSON.stringify({ token: fresh }),
    })
    t.equal(res.statusCode, 403)
    t.equal((await exchange(gw, fresh)).statusCode, 201, 'the link still works from the page')
  })

  t.test('malformed and made-up tokens', async (t) => {
    for (const bad of ['x', `tgwpl_${'a'.repeat(49)}`, token.replace('tgwpl_', 'tgwps_')]) {
      t.equal((await exchange(gw, bad)).statusCode, 401, bad)
    }
    t.equal((await portal(gw, { cookie: `tgwps_${'a'.repeat(49)}` }, 'GET', '/keys')).statusCode, 401)
    t.equal((await portal(gw, {}, 'GET', '/keys')).statusCode, 401, 'no credential')
  })

  t.test('an expired link and an expired session are refused', async (t) => {
    const { made: unused, token: late } = await openSession(gw, parent, sub)
    await gw.sql`update portal_sessions set expires_at = now() - interval '1 second' where id = ${unused.id}`
    t.equal((await exchange(gw, late)).statusCode, 401, 'the link')
    await gw.sql`update portal_sessions set expires_at = now() - interval '1 second' where id = ${made.id}`
    const res = await portal(gw, { cookie }, 'GET', '/session')
    t.equal(res.statusCode, 401, 'the session')
    t.match(res.json().detail, /ended.*new portal link/)
    t.notOk(
      ok(await manage(gw, parent, 'GET', `/${sub}/portal-sessions`), 200).data.some((s: JsonBody) => s.id === made.id),
      'an expired session is not listed as open',
    )
  })
})

t.test('no Secure cookie over plain http (the default ISSUER_URL)', async (t) => {
  const gw = await startGateway(t)
  const parent = await gw.createParent()
  const { made, token } = await openSession(gw, parent, await subAccount(gw, parent))
  t.match(made.url, /^http:\/\/localhost:\d+\/portal\/#tgwpl_/)
  const setCookie = String((await exchange(gw, token)).headers['set-cookie'])
  t.notOk(setCookie.includes('Secure'), setCookie)
  t.ok(setCookie.includes('HttpOnly') && setCookie.includes('SameSite=Strict'))
})

t.test('the portal API: one sub-account, its permissions, the key policy and ceiling, audit actor', async (t) => {
  const gw = await startGateway(t, { gatewayConfig: ROUTES })
  const parent = await gw.createParent()
  const sub = await subAccount(gw, parent, { key_policy: { allowed_scopes: ['orders:read', 'orders:list'] } })
  const otherSub = await subAccount(gw, parent, { name: 'other' })
  const otherKey = ok(
    await manage(gw, parent, 'POST', `/${otherSub}/api-keys`, { name: 'theirs', scopes: ['orders:read'] }),
    201,
  )
  const ceiling = await runCliHere(['accounts', 'scopes', '--account', parent.id, '--allow', 'orders:read'], {
    DATABASE_URL: gw.database.url,
    ENCRYPTION_KEY: TEST_ENCRYPTION_KEY,
  })
  t.equal(ceiling.code, 0, ceiling.stderr)
  const { made, token } = await openSession(gw, parent, sub)
  const cookie = cookieValue(await exchange(gw, token))
  const as = { cookie }

  const minted = await portal(gw, as, 'POST', '/keys', { name: 'mine', scopes: ['orders:read'] })
  t.equal(minted.statusCode, 201, minted.body)
  t.match(minted.json(), { api_key: /^tgw_/, client_secret: /^tgws_/, scopes: ['orders:read'] })
  t.equal(minted.headers['cache-control'], 'no-store')
  const keyId = minted.json().id as string
  const listed = ok(await portal(gw, as, 'GET', '/keys'), 200)
  t.same(
    listed.data.map((k: JsonBody) => k.id),
    [keyId],
    "only its own sub-account's keys",
  )
  t.notOk(/tgws?_[0-9A-Za-z]{49}/.test(JSON.stringify(listed)), 'no secrets in the list')

  t.test('a mint outside the policy or the ceiling is refused with the reason', async (t) => {
    const outsidePolicy = await portal(gw, as, 'POST', '/keys', { name: 'x', scopes: ['orders:write'] })
    t.equal(outsidePolicy.statusCode, 400)
    t.match(outsidePolicy.json(), { code: 'validation_failed', errors: [{ path: '/body/scopes/0' }] })
    t.match(outsidePolicy.json().detail, /outside/)
    const outsideCeiling = await portal(gw, as, 'POST', '/keys', { name: 'x', scopes: ['orders:list'] })
    t.equal(outsideCeiling.statusCode, 400)
    t.match(outsideCeiling.json().detail, /operator allows/)
    const reserved = await portal(gw, as, 'POST', '/keys', { name: 'x', scopes: ['sub_accounts:write'] })
    t.equal(reserved.statusCode, 400)
  })

  t.test("another sub-account's key is 404 to roll and revoke", async (t) => {
    t.equal((await portal(gw, as, 'POST', `/keys/${otherKey.id}/revoke`)).statusCode, 404)
    t.equal((await portal(gw, as, 'POST', `/keys/${otherKey.id}/roll`, {})).statusCode, 404)
    t.equal((await portal(gw, as, 'POST', '/keys/nope/revoke')).statusCode, 404)
    const theirs = ok(await manage(gw, parent, 'GET', `/${otherSub}/api-keys/${otherKey.id}`), 200)
    t.equal(theirs.status, 'active', 'untouched')
  })

  t.test('roll and revoke, with audit events naming the session', async (t) => {
    const rolled = await portal(gw, as, 'POST', `/keys/${keyId}/roll`, { expires_in_seconds: 0 })
    t.equal(rolled.statusCode, 201, rolled.body)
    t.match(rolled.json(), { rolled_from: keyId, api_key: /^tgw_/ })
    const revoked = await portal(gw, as, 'POST', `/keys/${rolled.json().id}/revoke`)
    t.equal(revoked.statusCode, 200)
    t.equal(revoked.json().status, 'revoked')
    const events = ok(await manage(gw, parent, 'GET', '/events?type=api_key.*'), 200).data as JsonBody[]
    const byPortal = events.filter((e) => e.actor.type === 'portal_session')
    t.same(
      byPortal.map((e) => e.type),
      ['api_key.revoked', 'api_key.rolled', 'api_key.created'],
    )
    for (const e of byPortal) t.same(e.actor, { type: 'portal_session', id: made.id, key_id: null })
  })

  t.test('usage and requests of its own sub-account', async (t) => {
    const usage = ok(await portal(gw, as, 'GET', '/usage'), 200)
    t.match(usage, { month: /^\d{4}-\d{2}$/, used: 0, limits: { rate: null, monthly_quota: null } })
    // A plan's limits are the sub-account's too, where it sets none of their kind (docs/api.md, Plans).
    const plan = ok(
      await manage(gw, parent, 'POST', '/plans', { name: 'p', limits: { monthly_quota: { requests: 77 } } }),
      201,
    )
    ok(await manage(gw, parent, 'PATCH', `/${sub}`, { plan_id: plan.id }), 200)
    const planned = ok(await portal(gw, as, 'GET', '/usage'), 200)
    t.same(planned.limits, { rate: null, monthly_quota: { requests: 77 } }, "the plan's quota shows in the portal")
    ok(await manage(gw, parent, 'PATCH', `/${sub}`, { plan_id: null }), 200)
    const requests = ok(await portal(gw, as, 'GET', '/requests'), 200)
    t.same(requests, { data: [], next_cursor: null })
    t.equal((await portal(gw, as, 'GET', `/requests?sub_account_id=${otherSub}`)).statusCode, 400, 'no other')
  })

  t.test(
    "credits: its own balance and grants, never another sub-account's, without the parent's metadata",
    async (t) => {
      const grant = async (id: string, body: JsonBody) =>
        ok(await manage(gw, parent, 'POST', `/${id}/credits/grants`, { meter: 'tokens', ...body }), 201)
      const mine = await grant(sub, { units: 700, metadata: { invoice: 'in_mine' } })
      const theirs = await grant(otherSub, { units: 9000, metadata: { invoice: 'in_theirs' } })
      const credits = ok(await portal(gw, as, 'GET', '/credits'), 200)
      t.same(credits.balances, [{ meter: 'tokens', units_left: 700 }])
      t.same(
        credits.grants.map((g: JsonBody) => g.id),
        [mine.id],
        "its own grant only: the other sub-account's is not there",
      )
      const { metadata: _, ...shown } = mine
      t.same(credits.grants[0], shown, "the grant as the parent sees it, less the parent's metadata")
      t.notMatch(JSON.stringify(credits), theirs.id)
      t.notMatch(JSON.stringify(credits), /in_mine|in_theirs/)
      for (const query of [`?sub_account_id=${otherSub}`, `?id=${otherSub}`])
        t.equal((await portal(gw, as, 'GET', `/credits${query}`)).statusCode, 400, `${query}: no other`)
      // The other sub-account's own session sees its own, and not this one's.
      const { token: other } = await openSession(gw, parent, otherSub, { permissions: ['usage:read'] })
      const otherCredits = ok(
        await portal(gw, { cookie: cookieValue(await exchange(gw, other)) }, 'GET', '/credits'),
        200,
      )
      t.same(
        otherCredits.grants.map((g: JsonBody) => g.id),
        [theirs.id],
      )
      t.same(otherCredits.balances, [{ meter: 'tokens', units_left: 9000 }])
      // A plan's credit limit names its meter too: a balance of 0 before any grant.
      const plan = ok(
        await manage(gw, parent, 'POST', '/plans', {
          name: 'credits',
          limits: { credits: { calls: { required: true } } },
        }),
        201,
      )
      ok(await manage(gw, parent, 'PATCH', `/${sub}`, { plan_id: plan.id }), 200)
      t.same(ok(await portal(gw, as, 'GET', '/credits'), 200).balances, [
        { meter: 'calls', units_left: 0 },
        { meter: 'tokens', units_left: 700 },
      ])
      ok(await manage(gw, parent, 'PATCH', `/${sub}`, { plan_id: null }), 200)
    },
  )

  t.test('permissions are enforced per route', async (t) => {
    const cases: [string, string, string, unknown?][] = [
      ['keys:read', 'GET', '/keys'],
      ['keys:write', 'POST', '/keys', { name: 'k', scopes: ['orders:read'] }],
      ['keys:write', 'POST', `/keys/${keyId}/revoke`],
      ['keys:write', 'POST', `/keys/${keyId}/roll`, {}],
      ['usage:read', 'GET', '/usage'],
      ['usage:read', 'GET', '/credits'],
      ['requests:read', 'GET', '/requests'],
    ]
    for (const permission of ALL) {
      const { token: one } = await openSession(gw, parent, sub, { permissions: [permission] })
      const limited = { cookie: cookieValue(await exchange(gw, one)) }
      for (const [needs, method, path, body] of cases) {
        const res = await portal(gw, limited, method, path, body)
        if (needs === permission) t.not(res.statusCode, 403, `${permission}: ${method} ${path} allowed`)
        else {
          t.equal(res.statusCode, 403, `${permission}: ${method} ${path} refused`)
          t.match(res.json(), { code: 'insufficient_scope', detail: new RegExp(needs) })
        }
      }
    }
  })

  t.test('the session reaches nothing else: not /v1, not the proxy; a key does not open the portal', async (t) => {
    const bearer = cookie
    for (const url of ['/v1/sub-accounts', `/v1/sub-accounts/${sub}/api-keys`, '/v1/sub-accounts/usage', '/orders/1']) {
      const res = await gw.app.inject({ method: 'GET', url, headers: { authorization: `Bearer ${bearer}` } })
      t.equal(res.statusCode, 401, `bearer on ${url}`)
      const withCookie = await gw.app.inject({ method: 'GET', url, headers: { cookie: `tgw_portal=${cookie}` } })
      t.equal(withCookie.statusCode, 401, `cookie on ${url}`)
    }
    t.equal((await portal(gw, { bearer: parent.apiKey }, 'GET', '/keys')).statusCode, 401, 'a parent key')
    t.equal((await portal(gw, { bearer: otherKey.api_key }, 'GET', '/keys')).statusCode, 401, 'a sub-account key')
    t.equal(upstream.received.length, 0, 'the upstream saw nothing')
  })
})

t.test('a key minted in the portal to end within a day: its api_key.expiring at once', async (t) => {
  // The timer's first sweep is an hour away: only the sweep the mint asks for can write it.
  const gw = await startGateway(t, { alerts: { firstKeySweepAfterMs: 3_600_000 } })
  const parent = await gw.createParent()
  const sub = await subAccount(gw, parent)
  const { token } = await openSession(gw, parent, sub)
  const as = { cookie: cookieValue(await exchange(gw, token)) }
  const expiresAt = new Date(Date.now() + 12 * 3_600_000).toISOString()
  const minted = ok(
    await portal(gw, as, 'POST', '/keys', { name: 'short', scopes: ['orders:read'], expires_at: expiresAt }),
    201,
  )
  const expiring = async () =>
    ok(await manage(gw, parent, 'GET', '/events?type=api_key.expiring'), 200).data as JsonBody[]
  t.ok(await until(10_000, async () => (await expiring()).length > 0), 'written within seconds')
  t.match(await expiring(), [{ target: { type: 'api_key', id: minted.id }, data: { object: { expires_in_days: 1 } } }])
})

t.test('DELETE and deactivation end the session on another replica within 1 s', async (t) => {
  const [one, two] = await startReplicas(t, 2)
  const parent = await one!.createParent()
  const sub = await subAccount(one!, parent)

  const signedIn = async () => {
    const { made, token } = await openSession(one!, parent, sub)
    const cookie = cookieValue(await exchange(one!, token))
    t.equal((await portal(two!, { cookie }, 'GET', '/keys')).statusCode, 200, 'works on the other replica')
    return { id: made.id as string, cookie }
  }
  const refusedWithin = (cookie: string) =>
    eventually(1_000, async () => (await portal(two!, { cookie }, 'GET', '/keys')).statusCode === 401, 10)

  const deleted = await signedIn()
  t.equal((await manage(one!, parent, 'DELETE', `/${sub}/portal-sessions/${deleted.id}`)).statusCode, 204)
  t.not(await refusedWithin(deleted.cookie), null, 'DELETE')

  const deactivated = await signedIn()
  ok(await manage(one!, parent, 'POST', `/${sub}/deactivate`), 200)
  t.not(await refusedWithin(deactivated.cookie), null, 'deactivation')
  ok(await manage(one!, parent, 'POST', `/${sub}/reactivate`), 200)
  t.equal((await portal(two!, deactivated, 'GET', '/keys')).statusCode, 401, 'reactivation does not bring it back')
  const [row] = await one!.sql`select ended_reason from portal_sessions where id = ${deactivated.id}`
  t.equal(row!.ended_reason, 'deactivated')
  t.equal((await manage(one!, parent, 'POST', `/${sub}/deactivate`)).statusCode, 200, 'deactivated again')
  t.equal(
    (await manage(one!, parent, 'POST', `/${sub}/portal-sessions`, { permissions: ALL })).statusCode,
    400,
    'none for a deactivated sub-account',
  )
})

const csp = (res: LightMyRequestResponse) => String(res.headers['content-security-policy'])
const cliEnv = (gw: TestGateway) => ({ DATABASE_URL: gw.database.url, ENCRYPTION_KEY: TEST_ENCRYPTION_KEY })
const setOrigins = (gw: TestGateway, parent: Parent, origins: string) =>
  runCliHere(['accounts', 'portal-origins', '--account', parent.id, '--origins', origins], cliEnv(gw))

t.test("the page: framed by no one but in a frame's load; no Referer or query changes it", async (t) => {
  const gw = await startGateway(t)
  const parent = await gw.createParent()
  const { made } = await openSession(gw, parent, await subAccount(gw, parent))
  const set = await setOrigins(gw, parent, 'https://a.example')
  t.equal(set.code, 0, set.stderr)
  const page = (query: string, headers: Record<string, string> = {}) =>
    gw.app.inject({ method: 'GET', url: `/portal/${query}`, headers })

  const plain = await page('')
  t.equal(plain.statusCode, 200)
  t.match(plain.headers['content-type'], /^text\/html/)
  t.match(csp(plain), /frame-ancestors 'none'/)
  t.match(csp(plain), /default-src 'self'.*require-trusted-types-for 'script'; trusted-types 'none'/)
  t.equal(plain.headers['cache-control'], 'no-store')
  // The parent's session named in the query, its listed origin as Referer: the document is the same.
  for (const [query, headers] of [
    [`?session=${made.id}`, {}],
    ['', { referer: 'https://a.example/account' }],
    [`?session=${made.id}`, { referer: 'https://a.example/' }],
    ['', { 'sec-fetch-dest': 'document', referer: 'https://a.example/' }],
  ] as const)
    t.equal(csp(await page(query, headers)), csp(plain), `${query} ${JSON.stringify(headers)}: framed by no one`)

  // A browser loading it into a frame: any https page may show it, and only the exchange opens a session.
  const framed = await page('', { 'sec-fetch-dest': 'iframe' })
  t.match(csp(framed), /frame-ancestors https:;/)
  for (const headers of [
    { 'sec-fetch-dest': 'iframe', referer: 'https://a.example/' },
    { 'sec-fetch-dest': 'frame', referer: 'https://stranger.example/' },
  ])
    t.equal(csp(await page(`?session=${made.id}`, headers)), csp(framed), `${JSON.stringify(headers)}: the same`)
  t.match(csp(await page('', { 'sec-fetch-dest': 'embed' })), /frame-ancestors 'none'/, 'an <embed>: no one')
  t.match(
    csp(await gw.app.inject({ method: 'GET', url: '/portal/api/session', headers: { 'sec-fetch-dest': 'iframe' } })),
    /frame-ancestors 'none'/,
    'the API: none',
  )
})

t.test("the exchange: a framed page gets a session only where the link's parent lets it", async (t) => {
  const gw = await startGateway(t)
  const [a, b, none] = [await gw.createParent(), await gw.createParent(), await gw.createParent()]
  const [subA, subB, subNone] = [await subAccount(gw, a), await subAccount(gw, b), await subAccount(gw, none)]
  t.equal((await setOrigins(gw, a, 'https://a.example,https://b.example:8443/')).code, 0)
  t.equal((await setOrigins(gw, b, 'https://b-parent.example')).code, 0)
  const linkUsed = async (parent: Parent, sub: string, id: string) =>
    ok(await manage(gw, parent, 'GET', `/${sub}/portal-sessions`), 200).data.find((s: JsonBody) => s.id === id)
      .link_used

  const { made, token } = await openSession(gw, a, subA)
  for (const [ancestors, detail] of [
    [['https://b-parent.example'], /may not be used in a page of "https:\/\/b-parent\.example"/],
    [['https://a.example', 'https://stranger.example'], /"https:\/\/stranger\.example"/],
    [['https://a.example.evil'], /a\.example\.evil/],
    [['http://a.example'], /"http:\/\/a\.example"/],
    [['null'], /"null"/],
    [[], /could not tell which site frames it/],
  ] as const) {
    // Another parent's origin as Referer, A's own as Referer: the exchange reads neither.
    const res = await exchange(gw, token, [...ancestors], { referer: 'https://a.example/' })
    t.equal(res.statusCode, 403, `framed by ${ancestors.join(', ') || 'no one it can tell'}: refused`)
    t.match(res.json(), { code: 'insufficient_scope', detail })
    t.equal(res.headers['set-cookie'], undefined)
  }
  const unnamed = await gw.app.inject({
    method: 'POST',
    url: '/portal/api/session',
    headers: { 'content-type': 'application/json' },
    payload: JSON.stringify({ token, embedded: true }),
  })
  t.equal(unnamed.statusCode, 403, 'embedded without its ancestors: refused')
  const stray = await gw.app.inject({
    method: 'POST',
    url: '/portal/api/session',
    headers: { 'content-type': 'application/json' },
    payload: JSON.stringify({ token, ancestor_origins: ['https://a.example'] }),
  })
  t.equal(stray.statusCode, 400, 'ancestors without embedded: a bad request')
  t.match(stray.json(), { code: 'validation_failed', errors: [{ path: '/ancestor_origins' }] })
  t.equal(await linkUsed(a, subA, made.id), false, 'the link is still unused')

  const framed = await exchange(gw, token, ['https://b.example:8443', 'https://a.example'])
  t.equal(framed.statusCode, 201, framed.body)
  t.same(framed.json().frame_ancestors, ['https://a.example', 'https://b.example:8443'], "the link's parent's origins")
  t.match(framed.json().session_token, /^tgwps_/)

  // A top-level page gets them too (a cookie session, which no frame of another site is sent).
  const top = await exchange(gw, (await openSession(gw, a, subA)).token)
  t.equal(top.statusCode, 201)
  t.same(top.json().frame_ancestors, ['https://a.example', 'https://b.example:8443'])

  // B's link framed by A's origin: B's list decides, not the page's Referer or a session in the query.
  const { made: madeB, token: tokenB } = await openSession(gw, b, subB)
  const crossed = await exchange(gw, tokenB, ['https://a.example'], { referer: 'https://a.example/' })
  t.equal(crossed.statusCode, 403)
  t.equal(await linkUsed(b, subB, madeB.id), false)
  const atB = await exchange(gw, tokenB, ['https://b-parent.example'])
  t.equal(atB.statusCode, 201)
  t.same(atB.json().frame_ancestors, ['https://b-parent.example'])

  // A parent that lists no origin: framed anywhere, refused; in a window of its own, no ancestors.
  const { token: tokenNone } = await openSession(gw, none, subNone)
  t.equal((await exchange(gw, tokenNone, ['https://a.example'])).statusCode, 403)
  const alone = await exchange(gw, tokenNone)
  t.equal(alone.statusCode, 201)
  t.same(alone.json().frame_ancestors, [])

  // A list stored before origins were checked strictly: a bad entry is neither answered nor honoured.
  await gw.sql`update tenants set portal_origins = array['https://a.example;sandbox', 'https://ok.example'] where id = ${a.id}`
  const { token: old } = await openSession(gw, a, subA)
  t.equal(
    (await exchange(gw, old, ['https://a.example;sandbox'])).statusCode,
    403,
    'a stored bad origin frames nothing',
  )
  const kept = await exchange(gw, old, ['https://ok.example'])
  t.equal(kept.statusCode, 201)
  t.same(kept.json().frame_ancestors, ['https://ok.example'])
})

t.test(
  'portal origins: set and cleared by the CLI; anything but an https origin refused, nothing written',
  async (t) => {
    const gw = await startGateway(t)
    const parent = await gw.createParent()
    const set = await setOrigins(gw, parent, 'https://a.example,https://b.example:8443/,https://xn--bcher-kva.example')
    t.equal(set.code, 0, set.stderr)
    const listed = ['https://a.example', 'https://b.example:8443', 'https://xn--bcher-kva.example']
    t.same(JSON.parse(set.stdout).account.portal_origins, listed)
    const stored = async () =>
      (await gw.sql`select to_jsonb(portal_origins) as o from tenants where id = ${parent.id}`)[0]!.o as string[] | null

    for (const bad of [
      'http://a.example',
      'https://a.example/path',
      'https://*.example',
      "https://a.example 'unsafe-inline'",
      'https://u:p@a.example',
      'https://a.example;sandbox',
      'https://a.example;frame-ancestors',
      "https://a.example'",
      'https://a.example"',
      'https://a_b.example',
      'https://a.exa\tmple',
      'https://[::1]',
      'https://a.example:99999',
      'https://a.example?x',
      'https://a.example#x',
      'https://a..example',
      'https://bücher.example',
    ]) {
      const res = await setOrigins(gw, parent, `https://c.example,${bad}`)
      t.equal(res.code, 1, JSON.stringify(bad))
      t.match(res.stderr, /^error: --origins: /)
      t.ok(res.stderr.includes(JSON.stringify(bad.trim())), `the error names ${JSON.stringify(bad)}: ${res.stderr}`)
      t.equal(res.stdout, '')
    }
    t.same(await stored(), listed, 'nothing written')

    const none = await runCliHere(['accounts', 'portal-origins', '--account', parent.id, '--none'], cliEnv(gw))
    t.equal(none.code, 0, none.stderr)
    t.equal(await stored(), null)
    const audit = ok(await manage(gw, parent, 'GET', '/events?type=account.portal_origins_updated'), 200).data
    t.equal(audit.length, 2, 'an event for each change, none for a refused one')
    t.match(audit[1], { actor: { type: 'operator' }, data: { object: { portal_origins: listed } } })
  },
)

t.test('with CONSOLE=off there is no portal, and /portal is an ordinary path', async (t) => {
  const gw = await startGateway(t, { env: { CONSOLE: 'off' } })
  const parent = await gw.createParent()
  const sub = await subAccount(gw, parent)
  t.equal((await manage(gw, parent, 'POST', `/${sub}/portal-sessions`, { permissions: ALL })).statusCode, 404)
  t.equal((await gw.app.inject({ method: 'GET', url: '/portal/' })).statusCode, 404)
})

t.test(
  '/portal is the gateway’s while the console is on: no route may take it, a catch-all does not get it',
  async (t) => {
    t.throws(
      () => loadRouteTable({ routes: [{ prefix: '/portal', upstream: upstream.url }] }, undefined, true),
      /served by the gateway itself/,
    )
    t.doesNotThrow(() => loadRouteTable({ routes: [{ prefix: '/portal', upstream: upstream.url }] }, undefined, false))
    const gw = await startGateway(t, { upstreamUrl: upstream.url })
    const parent = await gw.createParent()
    const before = upstream.received.length
    for (const url of ['/portal/elsewhere', '/PORTAL/api/keys', '/portal/api/nothing']) {
      const res = await gw.call(parent.apiKey, { method: 'GET', url })
      t.equal(res.statusCode, 404, url)
    }
    t.equal((await gw.app.inject({ method: 'GET', url: '/portal?session=x' })).headers.location, '/portal/?session=x')
    t.equal(upstream.received.length, before, 'nothing reached the catch-all upstream')
  },
)

t.test('a portal call waits on Postgres at most its deadline: then 503', async (t) => {
  const gw = await startGateway(t, { storeDeadlines: STORE_DEADLINES })
  const parent = await gw.createParent()
  const { made, token } = await openSession(gw, parent, await subAccount(gw, parent))
  const cookie = cookieValue(await exchange(gw, token))
  let release = () => {}
  const released = new Promise<void>((resolve) => {
    release = resolve
  })
  let locked = () => {}
  const isLocked = new Promise<void>((resolve) => {
    locked = resolve
  })
  const holder = gw.sql.begin(async (tx) => {
    await tx`lock table portal_sessions in access exclusive mode`
    locked()
    await released
  })
  await isLocked
  const start = Date.now()
  const [res, page] = await Promise.all([
    portal(gw, { cookie }, 'GET', '/keys'),
    gw.app.inject({ method: 'GET', url: `/portal/?session=${made.id}` }),
  ])
  const took = Date.now() - start
  release()
  await holder
  t.equal(res.statusCode, 503, res.body)
  t.equal(res.json().code, 'store_unavailable')
  // The session's lookup waits STORE_DEADLINES.lookupMs at most, as a key's does (portal/credential-lookups.ts).
  t.ok(took < 5_000, `answered by the deadline (${took} ms)`)
  t.equal(page.statusCode, 200, 'the page still loads')
  t.match(String(page.headers['content-security-policy']), /frame-ancestors 'none'/, 'framed by no one')
  t.equal((await portal(gw, { cookie }, 'GET', '/keys')).statusCode, 200, 'and fine once Postgres answers')
})

t.test("portal calls spend their parent's MANAGEMENT_RATE", async (t) => {
  const gw = await startGateway(t, { env: { MANAGEMENT_RATE: '4/60s' } })
  const parent = await gw.createParent()
  // Two of the parent's four: the sub-account and the session.
  const { token } = await openSession(gw, parent, await subAccount(gw, parent))
  const cookie = cookieValue(await exchange(gw, token))
  const statuses: number[] = []
  let last: LightMyRequestResponse | undefined
  for (let i = 0; i < 3; i++) {
    await sleep(150) // the limiter's lease renewal, as limits-proxy.test.ts waits for it
    last = await portal(gw, { cookie }, 'GET', '/keys')
    statuses.push(last.statusCode)
  }
  t.same(statuses, [200, 200, 429])
  t.match(last!.json(), { code: 'rate_limited', violated_policies: ['management.rate'] })
})
