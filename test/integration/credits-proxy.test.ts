// Prepaid credits on the proxy (docs/api.md, Credits), over real sockets to a real upstream that
// reports tokens, with two replicas sharing Postgres and a Redis prefix: a request under a required
// credit passes while the balance is above zero and is charged when its answer ends; at zero it is
// 402 credits_exhausted; the meter's flush burns grants in the burn order; a new grant pays what
// was owed; two replicas never admit beyond the stated debt; an expired grant's rest is gone at its
// expiry, to the second.
import t from 'tap'
import { metricValue, startGateway, type TestGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { eventually, until } from '../helpers/poll.js'
import { UNHURRIED_LIMITS } from '../helpers/limits.js'
import { checkProblem } from '../helpers/problems.js'
import { redisClient } from '../helpers/redis.js'
import { reportsTokens, startUpstream } from '../helpers/upstream.js'
import { exportRows } from '../../src/store/usage-periods.js'
import { usageEvent } from '../../src/usage/export.js'

const HOUR = 3_600_000
const upstream = await startUpstream(t, reportsTokens)
const routes = [
  { prefix: '/llm', upstream: upstream.url, meters: [{ name: 'tokens', header: 'x-tokens-used' }] },
  { prefix: '/img', upstream: upstream.url, meters: [{ name: 'images', header: 'x-tokens-used' }] },
]
const a = await startGateway(t, { ...UNHURRIED_LIMITS, usageFlushIntervalMs: HOUR, gatewayConfig: { routes } })
const b = await startGateway(t, {
  ...UNHURRIED_LIMITS,
  usageFlushIntervalMs: HOUR,
  gatewayConfig: { routes },
  database: a.database,
  redisKeyPrefix: a.redisKeyPrefix,
})
const P = await a.createParent({ name: 'P' })
// A grant made through one replica must reach the other's cached records: both must listen.
const redis = redisClient(t)
const subscribed = await eventually(5_000, async () => {
  const reply = (await redis.pubsub('NUMSUB', `${a.redisKeyPrefix}invalidate`)) as [string, number | string]
  return Number(reply[1]) === 2
})
t.ok(subscribed !== null, 'both replicas listen for invalidations')

const accountedBy = new Map<TestGateway, number>()
/** One request reporting `tokens` through `gw`, acting as `acting`, accounted (so charged) before the answer. */
async function send(gw: TestGateway, acting: string, tokens: number, prefix = '/llm') {
  const res = await callAs(gw.url, P.apiKey, { path: `${prefix}/x?tokens=${tokens}`, acting })
  const count = (accountedBy.get(gw) ?? 0) + 1
  accountedBy.set(gw, count)
  const done = await until(10_000, async () => (await metricValue(gw.app, 'tgw_proxied_requests_total')) >= count)
  if (!done) throw new Error('the gateway did not account the request')
  return res
}

const manage = (method: string, path: string, json?: unknown) =>
  callAs(a.url, P.apiKey, {
    acting: 'self',
    method,
    path: `/v1/sub-accounts${path}`,
    ...(json === undefined ? {} : { json }),
  })

async function subWithCredits() {
  const res = await manage('POST', '', { name: 'credits', limits: { credits: { tokens: { required: true } } } })
  if (res.status !== 201) throw new Error(`create: ${res.status} ${res.body}`)
  return (res.json() as { id: string }).id
}

async function grant(sub: string, body: Record<string, unknown>) {
  const res = await manage('POST', `/${sub}/credits/grants`, { meter: 'tokens', ...body })
  if (res.status !== 201) throw new Error(`grant: ${res.status} ${res.body}`)
  return res.json() as { id: string; units_left: number }
}

async function credits(sub: string) {
  await a.app.usageMeter.flush()
  await b.app.usageMeter.flush()
  const res = await manage('GET', `/${sub}/credits`)
  return res.json() as {
    balances: { meter: string; units_left: number }[]
    grants: { id: string; units_left: number }[]
  }
}

/** Waits until a request through `gw` passes: a grant made through the other replica reached it. */
async function passesOn(gw: TestGateway, sub: string, tokens: number) {
  let last = 0
  const passed = await until(5_000, async () => {
    const res = await send(gw, sub, tokens)
    last = res.status
    return res.status === 200
  })
  if (!passed) throw new Error(`no request passed through the replica (last ${last})`)
}

t.test('no grant: 402 credits_exhausted naming the meter; a grant lets requests pass', async (t) => {
  const sub = await subWithCredits()
  const refused = await send(a, sub, 1)
  checkProblem(t, refused, 402, 'credits_exhausted', 'nothing granted: refused')
  t.same(refused.json().violated_policies, ['sub_account.credits.tokens'])
  t.same(refused.json().meters, ['tokens'])
  t.match(refused.json().detail, /tokens/)
  t.notOk(refused.headers['retry-after'], 'no wait brings credits back')
  t.notOk(refused.headers['ratelimit-policy'], 'credits are no RateLimit field')
  await grant(sub, { units: 100 })
  t.equal((await send(a, sub, 0)).status, 200, 'the granting replica lets it pass at once')
  await passesOn(b, sub, 0)
})

t.test("a plan's credits hold for a sub-account on it that sets none of its own", async (t) => {
  const plan = await manage('POST', '/plans', { name: 'prepaid', limits: { credits: { tokens: { required: true } } } })
  t.equal(plan.status, 201, plan.body)
  const created = await manage('POST', '', { name: 'on a plan', plan_id: plan.json().id })
  t.equal(created.status, 201, created.body)
  const sub = created.json().id as string
  t.same(created.json().effective_limits.credits, { tokens: { required: true, low_threshold_percent: 10 } })
  const refused = await send(a, sub, 1)
  checkProblem(t, refused, 402, 'credits_exhausted', "the plan's credit, nothing granted: refused")
  await grant(sub, { units: 100 })
  t.equal((await send(a, sub, 0)).status, 200, 'granted: passes')
  await passesOn(b, sub, 0)
})

t.test("a plan's credit of one meter holds beside a sub-account's own of another, each with its grants", async (t) => {
  const plan = await manage('POST', '/plans', { name: 'images', limits: { credits: { images: { required: true } } } })
  t.equal(plan.status, 201, plan.body)
  const created = await manage('POST', '', {
    name: 'both',
    plan_id: plan.json().id,
    limits: { credits: { tokens: { required: true } } },
  })
  t.equal(created.status, 201, created.body)
  const sub = created.json().id as string
  t.same(Object.keys(created.json().effective_limits.credits), ['images', 'tokens'], 'both credits are in force')
  await grant(sub, { units: 100 })
  const refused = await send(a, sub, 1)
  checkProblem(t, refused, 402, 'credits_exhausted', "its own meter granted, the plan's not: refused")
  t.same(refused.json().meters, ['images'], "the plan's meter is the one used up")
  await grant(sub, { meter: 'images', units: 100 })
  const passed = await send(a, sub, 1, '/img')
  t.equal(passed.status, 200, `both granted: passes (${passed.body.slice(0, 200)})`)
  t.equal((await send(a, sub, 1)).status, 200, 'on either route')
  const { balances } = await credits(sub)
  t.same(
    balances,
    [
      { meter: 'images', units_left: 99 },
      { meter: 'tokens', units_left: 99 },
    ],
    'each meter burns its own',
  )
})

t.test("under a plan's credit, what went beyond the grants is owed, as under a sub-account's own", async (t) => {
  const plan = await manage('POST', '/plans', {
    name: 'overdrawn',
    limits: { credits: { tokens: { required: true } } },
  })
  t.equal(plan.status, 201, plan.body)
  const planId = plan.json().id as string
  const onPlan = (await manage('POST', '', { name: 'its plan', plan_id: planId })).json().id as string
  // A parent's default plan holds for a sub-account without one of its own.
  const settings = await manage('PATCH', '/settings', { default_plan_id: planId })
  t.equal(settings.status, 200, settings.body)
  const onDefault = (await manage('POST', '', { name: 'the default plan' })).json().id as string
  t.teardown(async () => {
    await manage('PATCH', '/settings', { default_plan_id: null })
  })
  for (const sub of [onPlan, onDefault]) {
    await grant(sub, { units: 100 })
    t.equal((await send(a, sub, 60)).status, 200, '60 of 100')
    t.equal((await send(a, sub, 60)).status, 200, '120 of 100: admitted while the balance was above zero')
    checkProblem(t, await send(a, sub, 1), 402, 'credits_exhausted', 'then refused')
    t.same((await credits(sub)).balances, [{ meter: 'tokens', units_left: -20 }], 'the 20 beyond the grant are owed')
    t.equal((await grant(sub, { units: 50 })).units_left, 30, 'the next grant pays them')
  }
})

t.test('passes while above zero, charged after, 402 at zero; a new grant pays the debt', async (t) => {
  const sub = await subWithCredits()
  const made = await grant(sub, { units: 100 })
  for (const used of [30, 60, 90, 120]) {
    const res = await send(a, sub, 30)
    t.equal(res.status, 200, `${used} of 100 tokens: admitted while the balance was above zero`)
  }
  const refused = await send(a, sub, 1)
  checkProblem(t, refused, 402, 'credits_exhausted', 'at 120 of 100: refused')
  const after = await credits(sub)
  t.same(after.balances, [{ meter: 'tokens', units_left: -20 }], 'the balance is 20 below zero: the last answer')
  t.equal(after.grants.find((g) => g.id === made.id)!.units_left, 0, 'the grant is burned')
  const next = await grant(sub, { units: 50 })
  t.equal(next.units_left, 30, 'the new grant paid the 20 owed')
  t.same((await credits(sub)).balances, [{ meter: 'tokens', units_left: 30 }])
  t.equal((await send(a, sub, 10)).status, 200, 'it passes again')
})

t.test('the flush burns grants in order: priority, then soonest expiry, then oldest', async (t) => {
  const sub = await subWithCredits()
  const oldest = await grant(sub, { units: 30 })
  const newer = await grant(sub, { units: 30 })
  const expiring = await grant(sub, { units: 20, expires_at: new Date(Date.now() + HOUR).toISOString() })
  const first = await grant(sub, { units: 10, priority: 5 })
  t.equal((await send(a, sub, 25)).status, 200)
  t.equal((await send(a, sub, 20)).status, 200)
  const left = new Map((await credits(sub)).grants.map((g) => [g.id, g.units_left]))
  t.same(
    [left.get(first.id), left.get(expiring.id), left.get(oldest.id), left.get(newer.id)],
    [0, 0, 15, 30],
    '45 tokens: 10 of priority 5, 20 of the one that expires, 15 of the oldest',
  )
})

t.test('two replicas: never over beyond the answers in flight and a lease each', async (t) => {
  const sub = await subWithCredits()
  const granted = 200
  await grant(sub, { units: granted })
  await passesOn(b, sub, 0)
  let admitted = 0
  let answer = 0
  let refusedOn = 0
  // Alternating replicas, one answer at a time (each charged before the next is sent).
  for (let i = 0; i < 60 && refusedOn < 2; i++) {
    const gw = i % 2 === 0 ? a : b
    const res = await send(gw, sub, 15)
    if (res.status === 200) {
      admitted += 15
      answer++
    } else {
      checkProblem(t, res, 402, 'credits_exhausted', 'refused at zero')
      refusedOn++
    }
  }
  t.equal(refusedOn, 2, 'both replicas refuse once it is spent')
  const over = admitted - granted
  // One answer in flight at a time; each replica may hold a lease of one unit of balance
  // (max(1, ceil(M/100)) = 2 here) admitting one more answer: at most 3 answers over.
  t.ok(over >= 0, `all ${granted} tokens usable (${answer} answers, ${admitted} admitted)`)
  t.ok(over <= 3 * 15, `over by ${over} tokens: within three answers' units`)
  t.comment(`two replicas, 15-token answers one at a time: ${admitted} admitted of ${granted} granted`)
  const after = await credits(sub)
  t.equal(after.balances[0]!.units_left, granted - admitted, 'the balance counts every admitted unit')
})

t.test("an expired grant's rest is gone at its expiry, to the second", async (t) => {
  const sub = await subWithCredits()
  // Far enough ahead that the grant reaches both replicas first.
  const expiresAt = Date.now() + 3_000
  await grant(sub, { units: 1_000, expires_at: new Date(expiresAt).toISOString() })
  t.equal((await send(a, sub, 1)).status, 200)
  await passesOn(b, sub, 1)
  if (Date.now() >= expiresAt) throw new Error('the grant expired before the test could use it')
  await until(10_000, async () => Date.now() >= expiresAt)
  // The first requests after the expiry, with 998 units left in it: refused on both replicas.
  checkProblem(t, await send(a, sub, 1), 402, 'credits_exhausted', 'refused at the expiry (replica A)')
  checkProblem(t, await send(b, sub, 1), 402, 'credits_exhausted', 'refused at the expiry (replica B)')
  const after = await credits(sub)
  t.same(after.balances, [{ meter: 'tokens', units_left: 0 }], 'its rest is gone')
})

/** The parent's events of `type` about `targetId`, oldest first. */
const eventsOf = (type: string, targetId: string) =>
  a.database.sql<{ data: { object: Record<string, unknown> } }[]>`
    select data from events where account_id = ${P.id} and type = ${type} and target->>'id' = ${targetId} order by id`

async function waitForEvents(type: string, targetId: string, count: number) {
  const found = await until(10_000, async () => {
    // An expiry is told once every replica has flushed past it (store/credit-grants.ts
    // expiredUnmarked): the meters flush every second in production, by hand here.
    if (type === 'credits.expired') await Promise.all([a.app.usageMeter.flush(), b.app.usageMeter.flush()])
    await a.app.alerts.check()
    await b.app.alerts.check()
    return (await eventsOf(type, targetId)).length >= count
  })
  if (!found) throw new Error(`no ${type} of ${targetId}`)
  return eventsOf(type, targetId)
}

t.test('credits.low below the threshold, credits.exhausted at zero, once each until a grant', async (t) => {
  const sub = await subWithCredits()
  await grant(sub, { units: 100 })
  t.equal((await send(a, sub, 85)).status, 200)
  await a.app.usageMeter.flush()
  await a.app.alerts.check()
  t.equal((await eventsOf('credits.low', sub)).length, 0, '15 of 100 left: not below 10 %')
  t.equal((await send(a, sub, 10)).status, 200)
  // The replica knows 5 are left before its usage is written (it is, here, only when the test
  // flushes): a check then, as the background one each second may be, finds 15 in Postgres and
  // writes nothing. It must ask again once the usage is written, not take the balance for settled.
  t.ok(
    await until(10_000, async () =>
      a.app.limiter.creditUses().some((use) => use.tenantId === sub && use.remaining < 10),
    ),
    'the replica knows the balance is low',
  )
  await a.app.alerts.check()
  t.equal((await eventsOf('credits.low', sub)).length, 0, 'not low in Postgres yet: no event')
  await a.app.usageMeter.flush()
  const low = await waitForEvents('credits.low', sub, 1)
  t.match(low[0]!.data.object, {
    sub_account_id: sub,
    meter: 'tokens',
    units_left: 5,
    granted_units: 100,
    low_threshold_percent: 10,
  })
  t.equal((await send(b, sub, 10)).status, 200, '5 left: above zero, passes')
  await b.app.usageMeter.flush()
  const exhausted = await waitForEvents('credits.exhausted', sub, 1)
  t.match(exhausted[0]!.data.object, { units_left: -5 })
  await a.app.alerts.check()
  await b.app.alerts.check()
  t.equal((await eventsOf('credits.low', sub)).length, 1, 'one credits.low from both replicas')
  t.equal((await eventsOf('credits.exhausted', sub)).length, 1, 'one credits.exhausted')
  // A new grant re-arms them.
  await grant(sub, { units: 10 })
  await passesOn(a, sub, 0)
  t.equal((await send(a, sub, 5)).status, 200)
  await a.app.usageMeter.flush()
  await waitForEvents('credits.exhausted', sub, 2)
  t.pass('a new grant spent again: credits.exhausted again')
})

t.test('credits.expired once per grant whose expiry passed, with what it took', async (t) => {
  const sub = await subWithCredits()
  const expiring = await grant(sub, { units: 40, expires_at: new Date(Date.now() + 1_500).toISOString() })
  t.equal((await send(a, sub, 15)).status, 200)
  await a.app.usageMeter.flush()
  const expired = await waitForEvents('credits.expired', expiring.id, 1)
  t.match(expired[0]!.data.object, {
    id: expiring.id,
    sub_account_id: sub,
    units: 40,
    units_left: 0,
    units_expired: 25,
  })
  await b.app.alerts.check()
  t.equal((await eventsOf('credits.expired', expiring.id)).length, 1, 'written once')
})

t.test(
  'credits.expired waits for every replica to flush past the expiry: a late burn is not told as expired',
  async (t) => {
    const sub = await subWithCredits()
    const expiring = await grant(sub, { units: 40, expires_at: new Date(Date.now() + 3_600_000).toISOString() })
    await b.app.usageMeter.flush()
    // B serves 15 units while the grant lives, and holds them: its meter writes them later.
    t.equal((await send(b, sub, 15)).status, 200)
    await a.database.sql`update credit_grants set expires_at = now() where id = ${expiring.id}`
    await a.app.usageMeter.flush()
    await a.app.alerts.check()
    t.same(await eventsOf('credits.expired', expiring.id), [], 'not told while B has not flushed past the expiry')
    const expired = await waitForEvents('credits.expired', expiring.id, 1)
    t.match(expired[0]!.data.object, { id: expiring.id, units_left: 0, units_expired: 25 }, "B's 15 burned it first")
  },
)

t.test('a grant voided after its expiry is answered as it is; its credits.expired is written', async (t) => {
  const sub = await subWithCredits()
  const expiring = await grant(sub, { units: 40, expires_at: new Date(Date.now() + 3_600_000).toISOString() })
  // Its expiry passed a moment ago (whether the background check has seen it yet or not).
  await a.database.sql`update credit_grants set expires_at = now() - interval '1 second' where id = ${expiring.id}`
  const voided = await manage('POST', `/${sub}/credits/grants/${expiring.id}/void`)
  t.equal(voided.status, 200)
  t.match(voided.json(), { id: expiring.id, units_left: 0, voided_at: null }, 'nothing to void: it expired')
  const expired = await waitForEvents('credits.expired', expiring.id, 1)
  t.match(expired[0]!.data.object, { id: expiring.id, units_expired: 40 }, 'its rest went at its expiry')
  t.same(await eventsOf('credits.voided', expiring.id), [], 'no credits.voided')
})

t.test('the export carries the units burned from each grant; reconciliation checks the ledger', async (t) => {
  const sub = await subWithCredits()
  const first = await grant(sub, { units: 30, priority: 1 })
  const second = await grant(sub, { units: 100 })
  const expiring = await grant(sub, {
    units: 50,
    priority: 500,
    expires_at: new Date(Date.now() + 1_500).toISOString(),
  })
  const voided = await grant(sub, { units: 20, priority: 600 })
  t.equal((await manage('POST', `/${sub}/credits/grants/${voided.id}/void`)).status, 200)
  t.equal((await send(a, sub, 25)).status, 200)
  t.equal((await send(b, sub, 15)).status, 200)
  await a.app.usageMeter.flush()
  await b.app.usageMeter.flush()
  // The expiring grant's 50 are gone at its expiry.
  const gone = await until(
    10_000,
    async () => (await credits(sub)).grants.find((g) => g.id === expiring.id)!.units_left === 0,
  )
  t.ok(gone, 'the expiring grant expired')
  const rows: Parameters<typeof usageEvent>[0][] = []
  const from = new Date(Date.now() - 2 * HOUR)
  for await (const page of exportRows(a.database.sql, { from, to: new Date(Date.now() + HOUR), accountId: P.id }))
    rows.push(...page.filter((row) => row.sub_account_id === sub && row.meter === 'tokens'))
  const burned = rows.flatMap((row) => usageEvent(row, 3_600, 'https://gateway.example').data.credits ?? [])
  const byGrant = new Map<string, number>()
  for (const burn of burned) byGrant.set(burn.grant_id, (byGrant.get(burn.grant_id) ?? 0) + burn.units)
  t.same(
    Object.fromEntries(byGrant),
    { [first.id]: 30, [second.id]: 10 },
    "the records' data.credits: 30 of the first grant, 10 of the second",
  )
  const res = await manage('GET', '/usage/reconciliation')
  t.equal(res.status, 200)
  const ledger = (res.json() as { credits: Record<string, unknown>[] }).credits.find((c) => c.sub_account_id === sub)
  t.same(
    ledger,
    {
      sub_account_id: sub,
      meter: 'tokens',
      granted_units: 200,
      left_units: 90,
      expired_units: 70,
      debt_paid_units: 0,
      burned_units: 40,
      unexplained_units: 0,
    },
    'burned = granted − left − expired (voided or expired)',
  )
})
