// A sub-account's credits over time (docs/api.md, Credits), over real sockets to a real upstream
// that reports tokens, on real Postgres and Redis: GET …/credits/history's points from the grants
// made through the API and the burns of the meter's flush (start, grants, the open period's burns
// now, a void, end), the balance of GET …/credits at its end, a past range's start summing what
// came before it, a plan's credit limit as a meter, and its refusals (another parent's, the range).
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { checkProblem } from '../helpers/problems.js'
import { UNHURRIED_LIMITS } from '../helpers/limits.js'
import { reportsTokens, startUpstream } from '../helpers/upstream.js'

const HOUR = 3_600_000
const DAY = 24 * HOUR
const upstream = await startUpstream(t, reportsTokens)
const routes = [{ prefix: '/llm', upstream: upstream.url, meters: [{ name: 'tokens', header: 'x-tokens-used' }] }]
const gw = await startGateway(t, { ...UNHURRIED_LIMITS, usageFlushIntervalMs: HOUR, gatewayConfig: { routes } })
const P = await gw.createParent({ name: 'P' })
const Q = await gw.createParent({ name: 'Q' })

const manage = (key: string, method: string, path: string, json?: unknown) =>
  callAs(gw.url, key, {
    acting: 'self',
    method,
    path: `/v1/sub-accounts${path}`,
    ...(json === undefined ? {} : { json }),
  })

async function made(res: Awaited<ReturnType<typeof manage>>) {
  if (res.status !== 201) throw new Error(`${res.status} ${res.body}`)
  return res.json() as { id: string; units_left: number }
}
const grant = async (sub: string, body: Record<string, unknown>) =>
  made(await manage(P.apiKey, 'POST', `/${sub}/credits/grants`, { meter: 'tokens', ...body }))

interface Point {
  at: string
  kind: string
  change: number
  units_left: number
  grant_id: string | null
}
interface History {
  from: string
  to: string
  meters: { meter: string; owed_units: number; points: Point[] }[]
}
async function history(sub: string, query = ''): Promise<History> {
  const res = await manage(P.apiKey, 'GET', `/${sub}/credits/history${query}`)
  if (res.status !== 200) throw new Error(`history: ${res.status} ${res.body}`)
  return res.json() as History
}
const steps = (points: Point[]) => points.map((p) => `${p.kind} ${p.change} ${p.units_left}`)
const day = (ms: number) => new Date(ms).toISOString().slice(0, 10)

t.test('grants, the burns of the open period, a void: the points, ending at the balance', async (t) => {
  const sub = (
    await made(
      await manage(P.apiKey, 'POST', '', { name: 'burning', limits: { credits: { tokens: { required: true } } } }),
    )
  ).id
  const before = Date.now()
  const first = await grant(sub, { units: 1000 })
  for (const tokens of [120, 180]) {
    const res = await callAs(gw.url, P.apiKey, { path: `/llm/x?tokens=${tokens}`, acting: sub })
    t.equal(res.status, 200)
  }
  await gw.app.usageMeter.flush()
  const topUp = await grant(sub, { units: 500, priority: 50 })
  const spare = await grant(sub, { units: 40 })
  const voided = await manage(P.apiKey, 'POST', `/${sub}/credits/grants/${spare.id}/void`)
  t.equal(voided.status, 200)

  const answer = await history(sub)
  const today = day(Date.now())
  t.equal(answer.to, today, 'by default, this month so far')
  t.equal(answer.from, `${today.slice(0, 8)}01`)
  t.equal(answer.meters.length, 1)
  const [tokens] = answer.meters
  t.equal(tokens!.meter, 'tokens')
  t.equal(tokens!.owed_units, 0)
  t.same(steps(tokens!.points), [
    'start 0 0',
    'granted 1000 1000',
    'granted 500 1500',
    'granted 40 1540',
    'voided -40 1500',
    // The open period's burns, at the end: the period's end is still to come.
    'burned -300 1200',
    'end 0 1200',
  ])
  t.same(
    tokens!.points.map((p) => p.grant_id),
    [null, first.id, topUp.id, spare.id, spare.id, null, null],
  )
  const [start, granted] = tokens!.points
  t.equal(start!.at, `${answer.from}T00:00:00.000Z`)
  t.ok(Date.parse(granted!.at) >= before - 1000 && Date.parse(granted!.at) <= Date.now(), 'at the grant')
  const burned = tokens!.points.at(-2)!
  t.equal(burned.at, tokens!.points.at(-1)!.at, 'the open period burns now')
  const credits = (await manage(P.apiKey, 'GET', `/${sub}/credits`)).json() as { balances: unknown }
  t.same(credits.balances, [{ meter: 'tokens', units_left: 1200 }], 'the end is the balance')

  // A range of past days: what came before it is its start; the points in it alone.
  const moved = await gw.sql`update credit_grants set created_at = now() - interval '5 days' where id = ${first.id}`
  t.equal(moved.count, 1)
  await gw.sql`update credit_burns set period_start = period_start - interval '3 days'
               where grant_id in (${first.id}, ${topUp.id})`
  const past = await history(sub, `?from=${day(Date.now() - 4 * DAY)}&to=${day(Date.now() - DAY)}`)
  t.same(steps(past.meters[0]!.points), ['start 0 1000', 'burned -300 700', 'end 0 700'])
  t.equal(past.meters[0]!.points.at(-1)!.at, `${day(Date.now())}T00:00:00.000Z`, "ends at its last day's end")
})

t.test("a plan's credit limit names its meter; a debt is said beside the points", async (t) => {
  const plan = await made(
    await manage(P.apiKey, 'POST', '/plans', { name: 'prepaid', limits: { credits: { calls: { required: true } } } }),
  )
  const onPlan = (await made(await manage(P.apiKey, 'POST', '', { name: 'on a plan', plan_id: plan.id }))).id
  await grant(onPlan, { units: 10 })
  t.same(
    (await history(onPlan)).meters.map((m) => [m.meter, steps(m.points)]),
    [
      ['calls', ['start 0 0', 'end 0 0']],
      ['tokens', ['start 0 0', 'granted 10 10', 'end 0 10']],
    ],
  )
  const planned = (await manage(P.apiKey, 'GET', `/${onPlan}/credits`)).json() as { balances: unknown }
  t.same(
    planned.balances,
    [
      { meter: 'calls', units_left: 0 },
      { meter: 'tokens', units_left: 10 },
    ],
    "GET …/credits names the plan's meter too",
  )

  const owing = (
    await made(
      await manage(P.apiKey, 'POST', '', { name: 'owing', limits: { credits: { tokens: { required: true } } } }),
    )
  ).id
  await grant(owing, { units: 10 })
  const res = await callAs(gw.url, P.apiKey, { path: '/llm/x?tokens=25', acting: owing })
  t.equal(res.status, 200, 'admitted above zero, charged after')
  await gw.app.usageMeter.flush()
  const [tokens] = (await history(owing)).meters
  t.same([tokens!.owed_units, steps(tokens!.points)], [15, ['start 0 0', 'granted 10 10', 'burned -10 0', 'end 0 0']])
  const credits = (await manage(P.apiKey, 'GET', `/${owing}/credits`)).json() as { balances: unknown }
  t.same(credits.balances, [{ meter: 'tokens', units_left: -15 }], 'the balance counts the debt the points leave out')
})

t.test("refusals: another parent's sub-account, a bad range, an unknown parameter", async (t) => {
  const sub = (await made(await manage(P.apiKey, 'POST', '', { name: 'mine' }))).id
  await grant(sub, { units: 5 })
  checkProblem(t, await manage(Q.apiKey, 'GET', `/${sub}/credits/history`), 404, 'not_found', "another parent's")
  checkProblem(t, await manage(P.apiKey, 'GET', '/not-a-uuid/credits/history'), 404, 'not_found', 'not a UUID')
  const bad = await manage(P.apiKey, 'GET', `/${sub}/credits/history?from=yesterday`)
  checkProblem(t, bad, 400, 'validation_failed', 'a date that is not one')
  t.match(bad.json().errors, [{ path: '/querystring/from' }])
  const long = await manage(P.apiKey, 'GET', `/${sub}/credits/history?from=2025-01-01&to=2026-06-01`)
  checkProblem(t, long, 400, 'validation_failed', 'more than 366 days')
  const backwards = await manage(P.apiKey, 'GET', `/${sub}/credits/history?from=2026-06-02&to=2026-06-01`)
  checkProblem(t, backwards, 400, 'validation_failed', 'from after to')
  checkProblem(
    t,
    await manage(P.apiKey, 'GET', `/${sub}/credits/history?meter=tokens`),
    400,
    'validation_failed',
    'unknown',
  )
})
