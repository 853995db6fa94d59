// The simulator agrees with reality (docs/api.md, The limit simulator), the point of its design:
// bursts of concurrent requests through two replicas sharing Redis and Postgres, under enforced
// limits, across the end of a calendar month; then the same limits simulated over the same range of
// the request log. Each sub-account's simulated refusals equal its real 429s, in both months.
// The wall clock starts an hour before a month ends and jumps past it (helpers/wall-clock.ts).
// Redis's own clock, which refills rates, does not jump: only quotas are driven past the month.
import t from 'tap'
import { installWallClock } from '../helpers/wall-clock.js'

const realNow = Date.now()
const nextMonth = Date.UTC(new Date(realNow).getUTCFullYear(), new Date(realNow).getUTCMonth() + 1, 1)
const clock = installWallClock(nextMonth - 3_600_000)

const { startReplicas } = await import('../helpers/gateway.js')
const { callAs } = await import('../helpers/http.js')
const { startUpstream } = await import('../helpers/upstream.js')
const { UNHURRIED_LIMITS } = await import('../helpers/limits.js')

const upstream = await startUpstream(t)
// The second replica replays every simulation on a thread of its own, as a large range is
// (limits/replay-thread.ts); the first on the read's thread, as a small one is.
const replicas = await startReplicas(
  t,
  2,
  // Exact refusals on a busy machine too: never degraded, never a 503 for a slow first answer.
  {
    ...UNHURRIED_LIMITS,
    usageFlushIntervalMs: 100,
    gatewayConfig: { routes: [{ prefix: '/api', upstream: upstream.url }] },
  },
  () => ({ simulationThreadFromRecords: 0 }),
)
const [first] = replicas
const parent = await first!.createParent({ name: 'P' })
const made = async (name: string, limits: unknown) => {
  const res = await callAs(first!.url, parent.apiKey, {
    method: 'POST',
    path: '/v1/sub-accounts',
    acting: 'self',
    json: { name, limits },
  })
  if (res.status !== 201) throw new Error(res.body)
  return res.json().id as string
}

const limitsOf: Record<string, unknown> = {}
const subAccount = async (name: string, limits: unknown) => {
  const id = await made(name, limits)
  limitsOf[id] = limits
  return id
}
const rated = await subAccount('rated', { rate: { requests: 5, per_seconds: 3600 } })
const quotaUsedBefore = await subAccount('quota, used before', { monthly_quota: { requests: 7 } })
const quota = await subAccount('quota', { monthly_quota: { requests: 4 } })
const unlimited = await subAccount('unlimited', null)

/** Every status each sub-account got, in the range. */
const statuses = new Map<string, number[]>()
const request = async (replica: number, acting: string) => {
  const res = await callAs(replicas[replica]!.url, parent.apiKey, { path: '/api/x', acting })
  return res.status
}
/**
 * `size` requests at once, alternately to each replica; then each replica asked until it refuses,
 * so that no lease is left holding what another replica refused for (the limits are exact).
 */
const burst = async (acting: string, size: number, drain: boolean) => {
  const got = await Promise.all(Array.from({ length: size }, (_, i) => request(i % 2, acting)))
  if (drain)
    for (let replica = 0; replica < 2; replica++)
      for (let i = 0, status = 0; i < 20 && status !== 429; i++) {
        status = await request(replica, acting)
        got.push(status)
      }
  for (const status of got) if (status !== 200 && status !== 429) throw new Error(`a burst got ${status}`)
  statuses.set(acting, [...(statuses.get(acting) ?? []), ...got])
  return got
}
const refused = (got: readonly number[]) => got.filter((status) => status === 429).length

// Before the range: 3 of the 7 of the month, through both replicas.
for (let i = 0; i < 3; i++)
  if ((await request(i % 2, quotaUsedBefore)) !== 200) throw new Error('a request before the range was refused')
await Promise.all(replicas.map((replica) => replica.app.usageMeter.flush()))
await new Promise((resolve) => setTimeout(resolve, 5))
const from = new Date(Date.now()).toISOString()

// The month's last hour: every sub-account bursts.
const lastHour = {
  rated: await burst(rated, 12, true),
  quotaUsedBefore: await burst(quotaUsedBefore, 8, true),
  quota: await burst(quota, 7, true),
  unlimited: await burst(unlimited, 6, false),
}
// The next month's first second: the quotas start again.
clock.jumpTo(nextMonth + 1_000)
const nextMonthStart = {
  quotaUsedBefore: await burst(quotaUsedBefore, 10, true),
  quota: await burst(quota, 6, true),
}
await Promise.all(replicas.map((replica) => replica.app.requestLog!.flush()))
const to = new Date(Date.now() + 1).toISOString()

t.test('the traffic was what the limits allow, exactly, on two replicas', async (t) => {
  t.equal(lastHour.rated.length - refused(lastHour.rated), 5, 'the rate of 5 an hour let 5 through')
  t.equal(lastHour.quotaUsedBefore.length - refused(lastHour.quotaUsedBefore), 4, '7 a month, 3 used before: 4')
  t.equal(lastHour.quota.length - refused(lastHour.quota), 4, '4 a month')
  t.equal(refused(lastHour.unlimited), 0, 'no limit refuses nothing')
  t.equal(nextMonthStart.quotaUsedBefore.length - refused(nextMonthStart.quotaUsedBefore), 7, 'the new month: 7')
  t.equal(nextMonthStart.quota.length - refused(nextMonthStart.quota), 4, 'the new month: 4')
})

for (const [replica, replayedOn] of [
  [0, "the read's thread"],
  [1, 'a thread of its own'],
] as const)
  t.test(
    `each sub-account's limits simulated over the range refuse what the gateway refused (${replayedOn})`,
    async (t) => {
      for (const [id, got] of statuses) {
        const res = await callAs(replicas[replica]!.url, parent.apiKey, {
          method: 'POST',
          path: '/v1/sub-accounts/limits/simulations',
          acting: 'self',
          json: { limits: limitsOf[id] ?? {}, sub_account_id: id, from, to },
        })
        t.equal(res.status, 200, res.body)
        const { data, totals } = res.json() as { data: Record<string, unknown>[]; totals: unknown }
        t.same(
          data.map(({ sub_account_id, requests, would_refuse }) => ({ sub_account_id, requests, would_refuse })),
          [{ sub_account_id: id, requests: got.length, would_refuse: refused(got) }],
          `${id}: ${refused(got)} of ${got.length} refused, as real`,
        )
        t.same(totals, { requests: got.length, would_refuse: refused(got) })
      }
    },
  )
