// The limit simulator (docs/api.md, The limit simulator) against the real Postgres and a real
// upstream: traffic driven through the gateway under enforced limits (embedded: one process, so
// that the limiter's decisions are exact), then the same limits simulated over the same range of
// the request log. The simulator's refusals per sub-account equal the real 429s, a quota counting
// the month's use before the range; a tighter limit for every sub-account says whom it would have
// refused; bad input is a 400 naming the field, another parent's sub-account a 404.
import postgres from 'postgres'
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import type { JsonBody } from '../helpers/json.js'
import { holding } from '../helpers/held-transaction.js'
import { until } from '../helpers/poll.js'
import { checkProblem } from '../helpers/problems.js'
import { startUpstream } from '../helpers/upstream.js'

const upstream = await startUpstream(t)
const gw = await startGateway(t, {
  redis: false,
  usageFlushIntervalMs: 3_600_000,
  gatewayConfig: { routes: [{ prefix: '/api', upstream: upstream.url }] },
})
const parent = await gw.createParent({ name: 'P' })
const made = async (name: string, limits: unknown) => {
  const res = await callAs(gw.url, parent.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts',
    acting: 'self',
    json: { name, limits },
  })
  if (res.status !== 201) throw new Error(res.body)
  return res.json().id as string
}
const rate = { rate: { requests: 5, per_seconds: 3600 } }
const quota = { monthly_quota: { requests: 7 } }
const a = await made('a', rate)
const b = await made('b', quota)
const c = await made('c', null)
const send = async (acting: string, n: number) => {
  const statuses: number[] = []
  for (let i = 0; i < n; i++) statuses.push((await callAs(gw.url, parent.apiKey, { path: '/api/x', acting })).status)
  return statuses
}
/** A simulation asked of the gateway at `url`, as the parent. */
const simulateAt = (url: string) => (body: unknown) =>
  callAs(url, parent.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts/limits/simulations',
    acting: 'self',
    json: body,
  })
const simulate = simulateAt(gw.url)

// Before the range: b uses 3 of its month's 7.
if ((await send(b, 3)).join() !== '200,200,200') throw new Error("b's first three were not all forwarded")
await gw.app.usageMeter.flush()
await new Promise((resolve) => setTimeout(resolve, 5))
const from = new Date().toISOString()
// In the range: bursts past each limit, and c under none.
const real = {
  [a]: await send(a, 9),
  [b]: await send(b, 6),
  [c]: await send(c, 4),
}
await gw.app.requestLog!.flush()
const to = new Date(Date.now() + 1).toISOString()
const refusals = (statuses: number[]) => statuses.filter((s) => s === 429).length

t.test('the same limits simulated over the same range refuse what the gateway refused', async (t) => {
  t.equal(refusals(real[a]!), 4, 'the rate of 5 refused 4 of 9')
  t.equal(refusals(real[b]!), 2, 'the quota of 7, 3 used before, refused 2 of 6')
  for (const [sub, limits, name] of [
    [a, rate, 'a'],
    [b, quota, 'b'],
  ] as const) {
    const res = await simulate({ limits, sub_account_id: sub, from, to })
    t.equal(res.status, 200, res.body)
    const { data, totals } = res.json() as { data: JsonBody[]; totals: JsonBody }
    t.equal(data.length, 1, `${name}: one sub-account`)
    t.match(
      data[0],
      { sub_account_id: sub, requests: real[sub]!.length, would_refuse: refusals(real[sub]!) },
      `${name}: as real`,
    )
    t.same(totals, { requests: real[sub]!.length, would_refuse: refusals(real[sub]!) })
    t.ok(data[0]!.first_refusal_at >= from && data[0]!.first_refusal_at < to, `${name}: when, within the range`)
    t.equal(data[0]!.units.requests, real[sub]!.length, `${name}: its request units`)
  }
})

t.test('a tighter rate for every sub-account: whom it would have refused, most first', async (t) => {
  const res = await simulate({ limits: { rate: { requests: 2, per_seconds: 3600 } }, from, to })
  t.equal(res.status, 200, res.body)
  const { data, totals } = res.json() as { data: JsonBody[]; totals: JsonBody }
  // a: its 9 attempts (5 forwarded, 4 refused by its own rate) → 7; b: its 6 (4 + 2) → 4; c: 4 → 2.
  t.same(
    data.map((d) => [d.sub_account_id, d.requests, d.would_refuse]),
    [
      [a, 9, 7],
      [b, 6, 4],
      [c, 4, 2],
    ],
  )
  t.same(totals, { requests: 19, would_refuse: 13 })
  t.match(data[0]!.peak_second, { requests: Number }, 'its busiest second')
})

t.test("bad input: 400 naming the field; another parent's sub-account: 404", async (t) => {
  const cases: [string, unknown, RegExp][] = [
    ['an inverted range', { limits: rate, from: to, to: from }, /\/body\/to/],
    ['a range before the log', { limits: rate, from: '2020-01-01T00:00:00Z', to }, /\/body\/from/],
    ['a range in the future', { limits: rate, from, to: '2999-01-01T00:00:00Z' }, /\/body\/to/],
    ['a rate of 0', { limits: { rate: { requests: 0, per_seconds: 1 } }, from, to }, /\/body\/limits\/rate\/requests/],
    ['a shadow', { limits: { shadow: rate }, from, to }, /\/body\/limits\/shadow/],
    ['no range', { limits: rate }, /from/],
  ]
  for (const [what, body, field] of cases) {
    const res = await simulate(body)
    checkProblem(t, res, 400, 'validation_failed', what)
    t.match(JSON.stringify(res.json().errors), field, `${what}: names the field`)
  }
  const other = await gw.createParent({ name: 'Other' })
  const theirs = await callAs(gw.url, other.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts',
    acting: 'self',
    json: { name: 'x' },
  })
  checkProblem(
    t,
    await simulate({ limits: rate, sub_account_id: theirs.json().id, from, to }),
    404,
    'not_found',
    'theirs',
  )
})

t.test("a parent's simulations read nothing before their place: past two, 429 at once", async (t) => {
  // The month's usage locked: a simulation that reads it waits in the store.
  const release = await holding(gw.database.url, 'lock table usage_period_units in access exclusive mode')
  const statuses: number[] = []
  const calls = Array.from({ length: 12 }, () =>
    simulate({ limits: { rate: { requests: 1, per_seconds: 60 } }, from, to }).then((res) => {
      statuses.push(res.status)
      return res
    }),
  )
  try {
    t.ok(
      await until(10_000, async () => statuses.filter((s) => s === 429).length >= 10),
      `ten refused at once, the parent's two places taken (${statuses.join(',')})`,
    )
    // On a connection of its own: reads held before their place would hold the gateway's pool.
    const watch = postgres(gw.database.url, { max: 1, onnotice: () => {} })
    const [waiting] = await watch<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity
      where datname = current_database() and wait_event_type = 'Lock' and query ilike '%usage_period_units%'`.finally(
      () => watch.end(),
    )
    t.ok(waiting!.n <= 1, `one simulation's read in the store at the most (${waiting!.n})`)
  } finally {
    await release()
  }
  const answers = await Promise.all(calls)
  t.same(
    answers.map((res) => res.status).sort(),
    [...Array(2).fill(200), ...Array(10).fill(429)],
    'the two in their places answered',
  )
})

t.test('a simulation has a store deadline of its own, apart from the 1.5 s of other calls', async (t) => {
  // Seconds of paced reads over 10^7 records must not be cut at the management deadline; its own
  // (60 s by default) still answers 503 when the store is slower than that. Here 1 ms: the
  // simulation's reads cannot be done in time, and every other call keeps its own deadline.
  const hurried = await startGateway(t, {
    redis: false,
    database: gw.database,
    storeDeadlines: { simulationMs: 1 },
    gatewayConfig: { routes: [{ prefix: '/api', upstream: upstream.url }] },
  })
  const res = await callAs(hurried.url, parent.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts/limits/simulations',
    acting: 'self',
    json: { limits: rate, from, to },
  })
  checkProblem(t, res, 503, 'store_unavailable', 'past its own deadline')
  const list = await callAs(hurried.url, parent.apiKey, { path: '/v1/sub-accounts' })
  t.equal(list.status, 200, 'another call is not under it')
})

t.test('a range of more sub-accounts than a simulation replays: 400 naming the bound, on either thread', async (t) => {
  // Each sub-account holds its state until the answer: past the bound a replica's heap would give
  // out (a range of 10^5 active sub-accounts stopped one). Here the bound is 2, the range has 3.
  for (const [where, threadFrom] of [
    ["the read's thread", 1_000_000],
    ['a thread of its own', 0],
  ] as const) {
    for (const [most, expected] of [
      [2, 400],
      [3, 200],
    ] as const) {
      const bounded = await startGateway(t, {
        redis: false,
        database: gw.database,
        simulationMaxSubAccounts: most,
        simulationThreadFromRecords: threadFrom,
        gatewayConfig: { routes: [{ prefix: '/api', upstream: upstream.url }] },
      })
      const simulateOn = simulateAt(bounded.url)
      const all = await simulateOn({ limits: rate, from, to })
      if (expected === 400) {
        checkProblem(t, all, 400, 'validation_failed', `${where}, at most ${most}`)
        t.match(all.body, /more than 2 sub-accounts, the most a simulation replays: name a sub_account_id/)
        const one = await simulateOn({ limits: rate, sub_account_id: a, from, to })
        t.equal(one.status, 200, `${where}: one sub-account named is replayed`)
      } else {
        t.equal(all.status, 200, `${where}, at most ${most}: answered`)
        t.equal((all.json().data as unknown[]).length, 3, 'every sub-account of the range')
      }
      await bounded.close()
    }
  }
})
