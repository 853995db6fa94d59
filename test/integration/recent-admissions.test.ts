// The proxy's memory of its last admissions (src/tenancy/recent-admissions.ts, docs/internals.md, caches): the same
// request again is admitted without a lookup, and every change the gateway makes reaches that
// memory at once, on the replica that made it. Each case: the exact request is admitted twice
// (the second time from memory, checked on tgw_recent_admissions_total), then the change, then
// the exact request again, at once, gets the full check's answer. Slow in-process expiry, so that
// only the memory's invalidation can explain the new answer.
import t, { type Test } from 'tap'
import { recentAdmissions, startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { checkProblem } from '../helpers/problems.js'
import { startUpstream } from '../helpers/upstream.js'

const upstream = await startUpstream(t)
const gw = await startGateway(t, {
  upstreamUrl: upstream.url,
  cacheTimings: { localTtlMs: 60_000, negativeTtlMs: 60_000, reinvalidateAfterMs: 60_000 },
})

type Call = Parameters<typeof callAs>[2]

/** Admitted twice, the second time from memory. */
async function admittedFromMemory(t: Test, apiKey: string, call: Call): Promise<void> {
  t.equal(
    (await callAs(gw.url, apiKey, call)).status,
    200,
    `${call.method ?? 'GET'} ${call.path} acting ${call.acting ?? '(none)'}: admitted`,
  )
  const before = await recentAdmissions(gw)
  t.equal((await callAs(gw.url, apiKey, call)).status, 200, 'admitted again')
  t.equal((await recentAdmissions(gw)) - before, 1, 'the second time from memory')
}

const manage = (apiKey: string, method: string, path: string, json?: unknown) =>
  callAs(gw.url, apiKey, {
    method,
    path: `/v1/sub-accounts${path}`,
    acting: 'self',
    ...(json === undefined ? {} : { json }),
  })

t.test(
  'a parent gains its first active sub-account: a write without the acting header is refused at once',
  async (t) => {
    const parent = await gw.createParent()
    const write: Call = { method: 'POST', path: '/v1/orders', body: '{}' }
    await admittedFromMemory(t, parent.apiKey, write)
    t.equal((await manage(parent.apiKey, 'POST', '', { name: 'first' })).status, 201, 'a sub-account is created')
    checkProblem(t, await callAs(gw.url, parent.apiKey, write), 400, 'acting_tenant_required', 'the same write')
  },
)

t.test('the acting sub-account is deactivated: refused at once', async (t) => {
  const parent = await gw.createParent()
  const sub = JSON.parse((await manage(parent.apiKey, 'POST', '', { name: 'acted as' })).body) as { id: string }
  const read: Call = { path: '/v1/orders', acting: sub.id }
  await admittedFromMemory(t, parent.apiKey, read)
  t.equal((await manage(parent.apiKey, 'POST', `/${sub.id}/deactivate`)).status, 200, 'deactivated')
  checkProblem(t, await callAs(gw.url, parent.apiKey, read), 403, 'acting_tenant_deactivated', 'the same read')
})

t.test('a key is revoked: refused at once', async (t) => {
  const parent = await gw.createParent()
  const sub = JSON.parse((await manage(parent.apiKey, 'POST', '', { name: 'keyed' })).body) as { id: string }
  const key = JSON.parse(
    (await manage(parent.apiKey, 'POST', `/${sub.id}/api-keys`, { name: 'soon revoked', scopes: ['orders:read'] }))
      .body,
  ) as {
    id: string
    api_key: string
  }
  await admittedFromMemory(t, key.api_key, { path: '/v1/orders' })
  t.equal((await manage(parent.apiKey, 'POST', `/${sub.id}/api-keys/${key.id}/revoke`)).status, 200, 'revoked')
  checkProblem(t, await callAs(gw.url, key.api_key, { path: '/v1/orders' }), 401, 'unauthenticated', 'the same read')
})

t.test(
  'what the memory keys on: a different acting value, method kind or header count gets the full check',
  async (t) => {
    const parent = await gw.createParent()
    t.equal((await manage(parent.apiKey, 'POST', '', { name: 'other' })).status, 201, 'the parent has a sub-account')
    await admittedFromMemory(t, parent.apiKey, { path: '/v1/orders' })
    checkProblem(
      t,
      await callAs(gw.url, parent.apiKey, { method: 'DELETE', path: '/v1/orders' }),
      400,
      'acting_tenant_required',
      'a write, same headers',
    )
    checkProblem(
      t,
      await callAs(gw.url, parent.apiKey, { path: '/v1/orders', acting: '' }),
      400,
      'acting_tenant_malformed',
      'an empty acting header',
    )
    checkProblem(
      t,
      await callAs(gw.url, parent.apiKey, {
        path: '/v1/orders',
        headers: [['Authorization', `Bearer ${parent.apiKey}`]],
      }),
      401,
      'unauthenticated',
      'a second Authorization header',
    )
    const before = await recentAdmissions(gw)
    const spaced = await callAs(gw.url, null, {
      path: '/v1/orders',
      headers: [['Authorization', `Bearer ${' '.repeat(300)}${parent.apiKey}`]],
    })
    t.equal(spaced.status, 200, 'a key after 300 spaces is still the key')
    t.equal(
      (
        await callAs(gw.url, null, {
          path: '/v1/orders',
          headers: [['Authorization', `Bearer ${' '.repeat(300)}${parent.apiKey}`]],
        })
      ).status,
      200,
    )
    t.equal((await recentAdmissions(gw)) - before, 0, 'but so long a header is not remembered (bounded memory)')
  },
)
