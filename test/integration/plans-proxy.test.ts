// Plans enforced by the proxy (docs/api.md, Plans), over real sockets, with two replicas of one
// deployment (one database, one Redis key prefix) and a real upstream: a plan's rate refuses, a
// sub-account's own rate stands over its plan's, the parent's default plan holds for sub-accounts
// without one; a PATCH of a plan through one replica is enforced by the other within 1 s; and a
// plan's change is one UPDATE of one row, whatever the number of its sub-accounts (10^5 here).
import t from 'tap'
import { type GatewayOptions, startReplicas } from '../helpers/gateway.js'
import { callAs, rawRequest } from '../helpers/http.js'
import { agedRedis, preciseNow, UNHURRIED_LIMITS } from '../helpers/limits.js'
import { eventually, sleep } from '../helpers/poll.js'
import { redisClient, requireRedis } from '../helpers/redis.js'
import { tokenRequest } from '../helpers/tokens.js'
import { startUpstream } from '../helpers/upstream.js'

await requireRedis()
// In-process entries that live a minute: the other replica sees a change within 1 s only if told.
const SLOW_LOCAL_EXPIRY: GatewayOptions['cacheTimings'] = {
  localTtlMs: 60_000,
  negativeTtlMs: 60_000,
  reinvalidateAfterMs: 60_000,
}
const upstream = await startUpstream(t)
const [a, b] = (await startReplicas(t, 2, {
  ...UNHURRIED_LIMITS,
  cacheTimings: SLOW_LOCAL_EXPIRY,
  gatewayConfig: { routes: [{ prefix: '/v1/things', upstream: upstream.url }] },
})) as [Awaited<ReturnType<typeof startReplicas>>[0], Awaited<ReturnType<typeof startReplicas>>[0]]
const redis = redisClient(t)
await agedRedis(redis, a.redisKeyPrefix!)
const subscribed = await eventually(5_000, async () => {
  const reply = (await redis.pubsub('NUMSUB', `${a.redisKeyPrefix}invalidate`)) as [string, number | string]
  return Number(reply[1]) === 2
})
const sql = a.database.sql
const scopes = ['sub_accounts:read', 'sub_accounts:write', 'things:read']
t.ok(subscribed !== null, 'both replicas listen for invalidations')

async function manage(key: string, method: string, path: string, json?: unknown) {
  const res = await callAs(a.url, key, { method, path: `/v1/sub-accounts${path}`, acting: 'self', json })
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${res.body}`)
  return res.json() as { id: string }
}
const proxied = (url: string, key: string, acting: string, path = '/v1/things/x') => callAs(url, key, { path, acting })

t.test("a plan's rate refuses on the proxy; its own rate stands over it; the default plan holds", async (t) => {
  const parent = await a.createParent({ scopes })
  const plan = await manage(parent.apiKey, 'POST', '/plans', {
    name: 'three',
    limits: { rate: { requests: 3, per_seconds: 3600 } },
  })
  const onPlan = await manage(parent.apiKey, 'POST', '', { name: 'on-plan', plan_id: plan.id })
  const statuses = []
  for (let i = 0; i < 5; i++) statuses.push((await proxied(a.url, parent.apiKey, onPlan.id)).status)
  t.same(statuses, [200, 200, 200, 429, 429], "the plan's 3 pass, then 429")
  const refusal = (await proxied(a.url, parent.apiKey, onPlan.id)).json()
  t.equal(refusal.code, 'rate_limited')
  t.same(refusal.violated_policies, ['sub_account.rate'])

  const ownRate = await manage(parent.apiKey, 'POST', '', {
    name: 'own-rate',
    plan_id: plan.id,
    limits: { rate: { requests: 1, per_seconds: 3600 } },
  })
  const own = [await proxied(a.url, parent.apiKey, ownRate.id), await proxied(a.url, parent.apiKey, ownRate.id)]
  t.same(
    own.map((r) => r.status),
    [200, 429],
    'its own rate (1) over the plan (3)',
  )

  const bare = await manage(parent.apiKey, 'POST', '', { name: 'bare' })
  const free = []
  for (let i = 0; i < 4; i++) free.push((await proxied(a.url, parent.apiKey, bare.id, '/v1/things/b')).status)
  t.same(free, [200, 200, 200, 200], 'no plan, no default: no limit')
  await manage(parent.apiKey, 'PATCH', '/settings', { default_plan_id: plan.id })
  // The account's record names its default: told to both replicas, as every change is.
  const defaulted = await eventually(2_000, async () => {
    const res = await proxied(b.url, parent.apiKey, bare.id, '/v1/things/b')
    return res.status === 429
  })
  t.ok(defaulted !== null, 'the default plan is enforced for a sub-account without a plan_id')
})

/** Sends a request acting as `acting` to `url` every 10 ms until `until()` returns a time passed. */
async function keepSending(url: string, key: string, acting: string, until: () => number | null) {
  const answers: { at: number; status: number }[] = []
  for (;;) {
    const deadline = until()
    if (deadline !== null && preciseNow() > deadline) return answers
    const res = await proxied(url, key, acting, '/v1/things/changing')
    answers.push({ at: preciseNow(), status: res.status })
    await sleep(10)
  }
}

/** How long after `changedAt` the first 429 came; null when none did. */
const firstRefusalAfter = (answers: { at: number; status: number }[], changedAt: number) => {
  const first = answers.find((x) => x.at >= changedAt && x.status === 429)
  return first === undefined ? null : first.at - changedAt
}

t.test('a PATCH of a plan through A is enforced by B within 1 s', async (t) => {
  const parent = await a.createParent({ scopes })
  const plan = await manage(parent.apiKey, 'POST', '/plans', {
    name: 'generous',
    limits: { rate: { requests: 1000, per_seconds: 1 } },
  })
  const sub = await manage(parent.apiKey, 'POST', '', { name: 'changing', plan_id: plan.id })
  let changedAt: number | null = null
  const sending = keepSending(b.url, parent.apiKey, sub.id, () => (changedAt === null ? null : changedAt + 1_500))
  await sleep(500)
  await manage(parent.apiKey, 'PATCH', `/plans/${plan.id}`, { limits: { rate: { requests: 1, per_seconds: 60 } } })
  changedAt = preciseNow()
  const answers = await sending
  t.ok(
    answers.filter((x) => x.at < changedAt!).every((x) => x.status === 200),
    'B passed all before the change',
  )
  const after = firstRefusalAfter(answers, changedAt)
  t.comment(`B refused ${after?.toFixed(0)} ms after the PATCH of the plan answered`)
  t.ok(after !== null && after <= 1_000, 'B refuses within 1 s')
})

t.test("a plan's change is one UPDATE of one row, with 10^5 sub-accounts on it; B enforces it", async (t) => {
  const parent = await a.createParent({ scopes })
  const plan = await manage(parent.apiKey, 'POST', '/plans', { name: 'crowded' })
  const sub = await manage(parent.apiKey, 'POST', '', { name: 'watched', plan_id: plan.id })
  const count = 100_000
  await sql`
    insert into tenants (parent_id, name, plan_id)
    select ${parent.id}, 'many-' || g, ${plan.id} from generate_series(1, ${count - 1}) g`
  // Every UPDATE statement, and every row it changes, on the tables a plan's change could touch.
  await sql.unsafe(`
    create table if not exists update_counts (tbl text not null, level text not null, at timestamptz default now());
    create or replace function count_update() returns trigger language plpgsql as $$
      begin insert into update_counts (tbl, level) values (tg_table_name, tg_level); return null; end $$;
    create or replace trigger tenants_update_statements after update on tenants
      for each statement execute function count_update();
    create or replace trigger tenants_update_rows after update on tenants
      for each row execute function count_update();
    create or replace trigger plans_update_statements after update on plans
      for each statement execute function count_update();
    create or replace trigger plans_update_rows after update on plans
      for each row execute function count_update();`)
  t.teardown(() =>
    sql.unsafe(`
      drop trigger tenants_update_statements on tenants; drop trigger tenants_update_rows on tenants;
      drop trigger plans_update_statements on plans; drop trigger plans_update_rows on plans;`),
  )
  t.equal((await proxied(b.url, parent.apiKey, sub.id)).status, 200, 'B knows the sub-account, no limit yet')
  await sql`delete from update_counts`

  let changedAt: number | null = null
  const sending = keepSending(b.url, parent.apiKey, sub.id, () => (changedAt === null ? null : changedAt + 1_500))
  await sleep(300)
  const sentAt = preciseNow()
  await manage(parent.apiKey, 'PATCH', `/plans/${plan.id}`, { limits: { rate: { requests: 1, per_seconds: 60 } } })
  changedAt = preciseNow()
  const answers = await sending
  const counts = await sql<{ tbl: string; level: string; n: number }[]>`
    select tbl, level, count(*)::int as n from update_counts group by tbl, level order by tbl, level`
  t.same(
    counts.map(({ tbl, level, n }) => `${tbl} ${level} ${n}`),
    ['plans ROW 1', 'plans STATEMENT 1'],
    'one UPDATE statement of one row (the plan); none of tenants',
  )
  const after = firstRefusalAfter(answers, changedAt)
  t.comment(
    `${count} sub-accounts on the plan: the PATCH answered in ${(changedAt - sentAt).toFixed(0)} ms; ` +
      `B refused ${after?.toFixed(0)} ms after it`,
  )
  t.ok(after !== null && after <= 1_000, 'B refuses within 1 s')
})

t.test("a plan's key policy: mints held to it, its allow-list enforced, a change of it on B within 1 s", async (t) => {
  const parent = await a.createParent({ scopes })
  const plan = await manage(parent.apiKey, 'POST', '/plans', {
    name: 'fenced',
    key_policy: { allowed_scopes: ['things:read'], max_ttl_seconds: 3600, ip_allowlist: ['127.0.0.2/32'] },
  })
  const sub = await manage(parent.apiKey, 'POST', '', { name: 'fenced', plan_id: plan.id })
  const mint = (body: Record<string, unknown>) =>
    callAs(a.url, parent.apiKey, {
      method: 'POST',
      path: `/v1/sub-accounts/${sub.id}/api-keys`,
      acting: 'self',
      json: { name: 'k', ...body },
    })
  const soon = new Date(Date.now() + 1_800_000).toISOString()
  const noExpiry = await mint({ scopes: ['things:read'] })
  t.equal(noExpiry.status, 400, "the plan's max_ttl_seconds: an expires_at is required")
  t.match(noExpiry.json().errors, [{ path: '/body/expires_at' }])
  const outside = await mint({ scopes: ['other:read'], expires_at: soon })
  t.equal(outside.status, 400, "a scope outside the plan's allowed_scopes")
  t.match(outside.json().errors, [{ path: /^\/body\/scopes/ }])
  const minted = await mint({ scopes: ['things:read'], expires_at: soon })
  t.equal(minted.status, 201, minted.body)
  const key = minted.json() as { id: string; api_key: string; client_secret: string }

  const from = (gw: typeof a, localAddress: string) =>
    rawRequest(gw.url, {
      path: '/v1/things/fenced',
      headers: [['Authorization', `Bearer ${key.api_key}`]],
      localAddress,
    })
  const refused = await from(a, '127.0.0.1')
  t.equal(refused.status, 403)
  t.match(refused.json(), { code: 'ip_not_allowed' })
  t.equal((await from(a, '127.0.0.2')).status, 200, "from the plan's allow-list: passes")
  const token = (localAddress: string) =>
    tokenRequest(a.url, {
      form: { grant_type: 'client_credentials', client_id: key.id, client_secret: key.client_secret },
      localAddress,
    })
  t.equal((await token('127.0.0.1')).status, 403, "the token endpoint holds the plan's allow-list too")
  t.equal((await token('127.0.0.2')).status, 200)

  t.equal((await from(b, '127.0.0.1')).status, 403, 'B refuses 127.0.0.1 too')
  const sentAt = preciseNow()
  await manage(parent.apiKey, 'PATCH', `/plans/${plan.id}`, {
    key_policy: { allowed_scopes: ['things:read'], max_ttl_seconds: 3600, ip_allowlist: ['127.0.0.1/32'] },
  })
  const changedAt = preciseNow()
  const passed = await eventually(5_000, async () => (await from(b, '127.0.0.1')).status === 200)
  const after = preciseNow() - changedAt
  t.comment(
    `B let 127.0.0.1 through ${after.toFixed(0)} ms after the PATCH answered (${(changedAt - sentAt).toFixed(0)} ms)`,
  )
  t.ok(passed !== null && after <= 1_000, 'B follows the changed allow-list within 1 s')
})
