// Plans on the management API (docs/api.md, Plans), against real Postgres and Redis: create, list,
// get, PATCH and DELETE; 409 plan_in_use while a sub-account or the default names a plan; a
// sub-account's plan_id and the account's default_plan_id checked to be the parent's own; the
// effective limits and key policy decided kind by kind; the events; Idempotency-Key on a create.
import t from 'tap'
import { startGateway, type Parent } from '../helpers/gateway.js'
import { holding } from '../helpers/held-transaction.js'
import type { JsonBody } from '../helpers/json.js'
import { eventually } from '../helpers/poll.js'

const gw = await startGateway(t, { listen: false })
const sql = gw.database.sql

type Json = JsonBody
const call = (parent: Parent, method: string, url: string, body?: unknown, headers?: Record<string, string>) =>
  gw.call(parent.apiKey, {
    method: method as 'GET',
    url: `/v1/sub-accounts${url}`,
    acting: 'self',
    ...(body === undefined ? {} : { body }),
    ...(headers === undefined ? {} : { headers }),
  })
async function ok(parent: Parent, method: string, url: string, body?: unknown, status = 200): Promise<Json> {
  const res = await call(parent, method, url, body)
  if (res.statusCode !== status) throw new Error(`${method} ${url}: ${res.statusCode} ${res.body}`)
  return res.statusCode === 204 ? {} : (res.json() as Json)
}

const RATE = { requests: 100, per_seconds: 60 }
const QUOTA = { requests: 10_000 }
const NONE = { rate: null, monthly_quota: null }
const NO_POLICY = { allowed_scopes: null, max_ttl_seconds: null, ip_allowlist: null }

t.test('create, list, get, PATCH, DELETE; another parent sees none of it', async (t) => {
  const P = await gw.createParent()
  const other = await gw.createParent()
  const created = await call(P, 'POST', '/plans', {
    name: '  Pro  ',
    limits: { rate: RATE },
    key_policy: { max_ttl_seconds: 3600 },
    metadata: { tier: 'pro' },
  })
  t.equal(created.statusCode, 201, created.body)
  const plan = created.json() as Json
  t.equal(created.headers.location, `/v1/sub-accounts/plans/${plan.id}`)
  t.match(plan, {
    name: 'Pro',
    limits: { rate: RATE, monthly_quota: null },
    key_policy: { ...NO_POLICY, max_ttl_seconds: 3600 },
    metadata: { tier: 'pro' },
  })
  t.same((await ok(P, 'POST', '/plans', { name: 'Free' }, 201)).limits, NONE, 'no limits: both null')
  t.same(await ok(P, 'GET', `/plans/${plan.id}`), plan, 'GET answers what the create did')

  const first = await ok(P, 'GET', '/plans?limit=1')
  t.equal(first.data.length, 1)
  t.equal(first.data[0].id, plan.id, 'oldest first')
  t.type(first.next_cursor, 'string')
  const second = await ok(P, 'GET', `/plans?limit=1&cursor=${encodeURIComponent(first.next_cursor)}`)
  t.same(
    second.data.map((p: Json) => p.name),
    ['Free'],
  )
  t.equal(second.next_cursor, null)

  const patched = await ok(P, 'PATCH', `/plans/${plan.id}`, { limits: { monthly_quota: QUOTA } })
  t.same(patched.limits, { rate: null, monthly_quota: QUOTA }, 'limits replaced as a whole')
  t.equal(patched.name, 'Pro', 'the name is kept')
  t.equal((await call(P, 'PATCH', `/plans/${plan.id}`, {})).statusCode, 400, 'an empty PATCH is refused')

  for (const [method, body] of [
    ['GET', undefined],
    ['PATCH', { name: 'mine' }],
    ['DELETE', undefined],
  ] as const) {
    const res = await call(other, method, `/plans/${plan.id}`, body)
    t.equal(res.statusCode, 404, `another parent's ${method}: 404`)
    t.equal(res.json().code, 'not_found')
  }
  t.same((await ok(other, 'GET', '/plans')).data, [], "another parent's list is empty")
  t.equal((await call(P, 'GET', '/plans/not-a-uuid')).statusCode, 404)

  await ok(P, 'DELETE', `/plans/${plan.id}`, undefined, 204)
  t.equal((await call(P, 'GET', `/plans/${plan.id}`)).statusCode, 404, 'gone')
  t.equal((await call(P, 'DELETE', `/plans/${plan.id}`)).statusCode, 404, 'a second delete: 404')

  const events = await sql<{ type: string }[]>`
    select type from events where account_id = ${P.id} and target ->> 'id' = ${plan.id} order by seq`
  t.same(
    events.map((e) => e.type),
    ['plan.created', 'plan.updated', 'plan.deleted'],
    'an event for each change; none for the refused ones',
  )
})

t.test('validation: limits and key_policy as a sub-account has them, nothing written', async (t) => {
  const P = await gw.createParent()
  const cases: [Json, string][] = [
    [{ name: 'x', limits: { rate: { requests: 0, per_seconds: 1 } } }, '/body/limits/rate/requests'],
    [{ name: 'x', limits: { meters: { requests: { rate: null } } } }, '/body/limits/meters/requests'],
    [{ name: 'x', limits: { shadow: { burst: 1 } } }, '/body/limits/shadow/burst'],
    [{ name: 'x', key_policy: { ip_allowlist: ['10.0.0.0/33'] } }, '/body/key_policy/ip_allowlist/0'],
    [{ name: 'x', key_policy: { allowed_scopes: ['sub_accounts:read'] } }, '/body/key_policy/allowed_scopes/0'],
    [{ name: '   ' }, '/body/name'],
    [{ name: 'x', tier: 'pro' }, '/body/tier'],
  ]
  for (const [body, path] of cases) {
    const res = await call(P, 'POST', '/plans', body)
    t.equal(res.statusCode, 400, JSON.stringify(body))
    t.equal(res.json().code, 'validation_failed')
    t.ok(
      res.json().errors?.some((e: Json) => e.path === path),
      `names ${path}: ${res.body}`,
    )
  }
  t.same((await ok(P, 'GET', '/plans')).data, [], 'no plan made')
})

t.test("a sub-account's plan_id and the default_plan_id: the parent's own plan, else 400", async (t) => {
  const P = await gw.createParent()
  const other = await gw.createParent()
  const theirs = await ok(other, 'POST', '/plans', { name: 'theirs' }, 201)
  const mine = await ok(P, 'POST', '/plans', { name: 'mine' }, 201)
  const before = (await sql`select count(*)::int as n from tenants where parent_id = ${P.id}`)[0]!.n
  for (const planId of [theirs.id, '00000000-0000-4000-8000-000000000000']) {
    const res = await call(P, 'POST', '', { name: 's', plan_id: planId })
    t.equal(res.statusCode, 400, res.body)
    t.match(res.json(), { code: 'validation_failed', errors: [{ path: '/body/plan_id' }] })
  }
  t.equal((await sql`select count(*)::int as n from tenants where parent_id = ${P.id}`)[0]!.n, before, 'none made')
  const sub = await ok(P, 'POST', '', { name: 's', plan_id: mine.id }, 201)
  t.equal(sub.plan_id, mine.id)
  const refused = await call(P, 'PATCH', `/${sub.id}`, { plan_id: theirs.id })
  t.match(refused.json(), { code: 'validation_failed', errors: [{ path: '/body/plan_id' }] })
  t.equal((await ok(P, 'GET', `/${sub.id}`)).plan_id, mine.id, 'unchanged')
  t.equal((await call(P, 'PATCH', `/${sub.id}`, { plan_id: 'x' })).statusCode, 400, 'not a UUID')
  t.equal((await ok(P, 'PATCH', `/${sub.id}`, { plan_id: null })).plan_id, null, 'null clears it')

  const settings = await call(P, 'PATCH', '/settings', { default_plan_id: theirs.id })
  t.match(settings.json(), { code: 'validation_failed', errors: [{ path: '/body/default_plan_id' }] })
  t.same(await ok(P, 'GET', '/settings'), { default_plan_id: null, leak_policy: 'revoke' }, 'unchanged')
  t.same(await ok(P, 'PATCH', '/settings', { default_plan_id: mine.id }), {
    default_plan_id: mine.id,
    leak_policy: 'revoke',
  })
  t.same(await ok(P, 'GET', '/settings'), { default_plan_id: mine.id, leak_policy: 'revoke' })
  t.equal((await call(P, 'PATCH', '/settings', {})).statusCode, 400, 'a member is required')
  t.same(
    await ok(P, 'PATCH', '/settings', { default_plan_id: mine.id }),
    { default_plan_id: mine.id, leak_policy: 'revoke' },
    'again',
  )
  const settingsEvents = await sql<{ data: JsonBody }[]>`
    select data from events where account_id = ${P.id} and type = 'account.settings_updated'`
  t.same(
    settingsEvents.map((e) => e.data),
    [{ object: { default_plan_id: mine.id, leak_policy: 'revoke' }, previous: { default_plan_id: null } }],
    'one account.settings_updated: the repeat and the refusal wrote none',
  )
})

t.test('DELETE is refused with 409 plan_in_use while a sub-account or the default names it', async (t) => {
  const P = await gw.createParent()
  const plan = await ok(P, 'POST', '/plans', { name: 'used' }, 201)
  const sub = await ok(P, 'POST', '', { name: 's', plan_id: plan.id }, 201)
  const refused = await call(P, 'DELETE', `/plans/${plan.id}`)
  t.equal(refused.statusCode, 409)
  t.equal(refused.json().code, 'plan_in_use')
  t.match(refused.json().detail, /plan_id/)
  await ok(P, 'PATCH', `/${sub.id}`, { plan_id: null })
  await ok(P, 'PATCH', '/settings', { default_plan_id: plan.id })
  t.equal((await call(P, 'DELETE', `/plans/${plan.id}`)).json().code, 'plan_in_use', 'the default: 409 too')
  t.equal((await ok(P, 'GET', `/plans/${plan.id}`)).id, plan.id, 'still there')
  await ok(P, 'PATCH', '/settings', { default_plan_id: null })
  await ok(P, 'DELETE', `/plans/${plan.id}`, undefined, 204)
  const deleted =
    await sql`select count(*)::int as n from events where target ->> 'id' = ${plan.id} and type = 'plan.deleted'`
  t.equal(deleted[0]!.n, 1, 'one plan.deleted')
})

t.test('effective limits, kind by kind: its own where it sets that kind, else its plan', async (t) => {
  const P = await gw.createParent()
  const planLimits = {
    rate: { requests: 10, per_seconds: 1 },
    monthly_quota: { requests: 1000 },
    meters: { tokens: { rate: { units: 500, per_seconds: 60 }, monthly_quota: { units: 90_000 } } },
    shadow: { rate: { requests: 5, per_seconds: 1 }, monthly_quota: { requests: 99 } },
  }
  const plan = await ok(
    P,
    'POST',
    '/plans',
    { name: 'p', limits: planLimits, key_policy: { allowed_scopes: ['a:read'], max_ttl_seconds: 600 } },
    201,
  )
  const own = {
    rate: { requests: 3, per_seconds: 1 },
    meters: { tokens: { monthly_quota: { units: 7 } }, images: { rate: { units: 2, per_seconds: 1 } } },
    shadow: { monthly_quota: { requests: 11 } },
  }
  const sub = await ok(
    P,
    'POST',
    '',
    { name: 's', plan_id: plan.id, limits: own, key_policy: { max_ttl_seconds: 60 } },
    201,
  )
  const expected = {
    rate: own.rate,
    monthly_quota: planLimits.monthly_quota,
    meters: {
      images: { rate: { units: 2, per_seconds: 1 }, monthly_quota: null },
      tokens: { rate: planLimits.meters.tokens.rate, monthly_quota: { units: 7 } },
    },
    shadow: { rate: planLimits.shadow.rate, monthly_quota: { requests: 11 } },
  }
  t.same(sub.limits.rate, own.rate, '`limits` is its own')
  t.equal(sub.limits.monthly_quota, null)
  t.same(sub.effective_limits, expected, 'effective: each kind its own, else the plan')
  t.same(sub.effective_key_policy, { allowed_scopes: ['a:read'], max_ttl_seconds: 60, ip_allowlist: null })
  const listed = (await ok(P, 'GET', '')).data.find((s: Json) => s.id === sub.id)
  t.same(listed.effective_limits, expected, 'the list shows the same')
  // The event's object is built by SQL (events/present-sql.ts): the same rule, the same answer.
  const [created] = await sql<{ object: Json }[]>`
    select data -> 'object' as object from events where type = 'sub_account.created' and target ->> 'id' = ${sub.id}`
  t.same(created!.object, sub, "sub_account.created's object is the answer, effective limits and all")

  // Without a plan_id: the parent's default, then nothing.
  const bare = await ok(P, 'POST', '', { name: 'bare', limits: { rate: own.rate } }, 201)
  t.same(bare.effective_limits, { rate: own.rate, monthly_quota: null }, 'no plan: its own')
  await ok(P, 'PATCH', '/settings', { default_plan_id: plan.id })
  const defaulted = await ok(P, 'GET', `/${bare.id}`)
  t.equal(defaulted.plan_id, null)
  t.same(defaulted.effective_limits.monthly_quota, planLimits.monthly_quota, 'the default plan fills in')
  t.same(defaulted.effective_limits.rate, own.rate, 'its own rate stands')
  // A change of the plan shows in every sub-account under it.
  await ok(P, 'PATCH', `/plans/${plan.id}`, { limits: { monthly_quota: { requests: 5 } } })
  t.same((await ok(P, 'GET', `/${bare.id}`)).effective_limits, { rate: own.rate, monthly_quota: { requests: 5 } })
  const renamed = await ok(P, 'PATCH', `/${bare.id}`, { name: 'renamed' })
  const [updated] = await sql<{ object: Json }[]>`
    select data -> 'object' as object from events where type = 'sub_account.updated' and target ->> 'id' = ${bare.id}`
  t.same(updated!.object, renamed, 'under the default plan too')
  await ok(P, 'PATCH', '/settings', { default_plan_id: null })
})

t.test('an Idempotency-Key on a create makes one plan, answered twice alike', async (t) => {
  const P = await gw.createParent()
  const headers = { 'idempotency-key': `plan-${Date.now()}` }
  const one = await call(P, 'POST', '/plans', { name: 'once' }, headers)
  const two = await call(P, 'POST', '/plans', { name: 'once' }, headers)
  t.equal(one.statusCode, 201)
  t.equal(two.statusCode, 201)
  t.equal(two.json().id, one.json().id, 'the same plan')
  t.equal((await ok(P, 'GET', '/plans')).data.length, 1, 'one plan')
})

t.test('a plan deleted while a write that names it waits: 400 naming the field, nothing written', async (t) => {
  const P = await gw.createParent()
  for (const [what, send, path] of [
    ['a create', (planId: string) => call(P, 'POST', '', { name: 'late', plan_id: planId }), '/body/plan_id'],
    [
      'the default',
      (planId: string) => call(P, 'PATCH', '/settings', { default_plan_id: planId }),
      '/body/default_plan_id',
    ],
  ] as const) {
    const plan = await ok(P, 'POST', '/plans', { name: 'going' }, 201)
    // The delete holds the plan's row: the write's check saw the plan, its foreign key waits.
    const release = await holding(gw.database.url, `delete from plans where id = '${plan.id}'`)
    const answer = send(plan.id)
    const waiting = await eventually(10_000, async () => {
      const [row] = await sql<{ n: number }[]>`
        select count(*)::int as n from pg_stat_activity
        where datname = current_database() and wait_event_type = 'Lock' and query ilike '%plan_id%'`
      return row!.n > 0
    })
    t.ok(waiting !== null, `${what} waits on the plan's row`)
    await release()
    const res = await answer
    t.equal(res.statusCode, 400, `${what}: ${res.body}`)
    t.match(res.json(), { code: 'validation_failed', errors: [{ path }] })
  }
  t.equal((await ok(P, 'GET', '')).data.length, 0, 'no sub-account made')
  t.same(await ok(P, 'GET', '/settings'), { default_plan_id: null, leak_policy: 'revoke' }, 'no default set')
})
