// The simulator's replay (src/limits/simulation.ts), in memory: a quota that crosses a month
// boundary counts the month's use before the range, then starts the next month at nothing; units
// are charged when each answer ended, in that order, not when it began; a busiest second and a
// first refusal are said.
import t from 'tap'
import { LimitReplay, TENANTS_A_TURN, type UseBefore } from '../../src/limits/simulation.js'
import type { Limits } from '../../src/limits/types.js'

interface Request {
  tenantId: string
  startMs: number
  endMs: number
  cost: number
  units: Record<string, number> | null
}
const DEC = Date.UTC(2026, 11, 1)
const request = (startMs: number, fields: Partial<Request> = {}): Request => ({
  tenantId: 'sub-1',
  startMs,
  endMs: startMs + 10,
  cost: 1,
  units: null,
  ...fields,
})

/** Each request taken in turn, as the route takes the log's, waiting only when the replay asks. */
async function simulateLimits(requests: readonly Request[], limits: Limits, useBefore: UseBefore) {
  const replay = new LimitReplay(limits, useBefore)
  for (const r of requests) await replay.take(r.tenantId, r.startMs, r.endMs, r.cost, r.units)
  return replay.close()
}

t.test('a quota across a month boundary: November counts its use before, December starts at 0', async (t) => {
  const limits: Limits = { rate: null, monthlyQuota: { requests: 5 } }
  const requests = [
    ...Array.from({ length: 4 }, (_, i) => request(DEC - 60_000 + i * 1_000)),
    ...Array.from({ length: 6 }, (_, i) => request(DEC + 60_000 + i * 1_000)),
  ]
  const months: string[] = []
  const [tenant] = await simulateLimits(requests, limits, (_tenant, meter, month) => {
    months.push(`${meter} ${month}`)
    return month === '2026-11' ? 3 : 0
  })
  t.equal(tenant!.requests, 10)
  t.equal(tenant!.would_refuse, 2 + 1, "November's last 2 (3 used before), and December's 6th")
  t.equal(tenant!.first_refusal_at, new Date(DEC - 60_000 + 2_000).toISOString())
  t.same(months, ['requests 2026-11', 'requests 2026-12'], "each month's use asked once")
})

t.test('units are charged when each answer ended, in that order', async (t) => {
  const limits: Limits = {
    rate: null,
    monthlyQuota: null,
    meters: [{ meter: 'tokens', rate: null, monthlyQuota: { requests: 100 } }],
  }
  const tokens = (n: number) => ({ tokens: n })
  const start = DEC + 3_600_000
  const [tenant] = await simulateLimits(
    [
      // A long answer of 150 tokens, begun first, ends after the next two begin: they still pass.
      request(start, { endMs: start + 10_000, units: tokens(150) }),
      request(start + 1_000, { units: tokens(1) }),
      request(start + 2_000, { units: tokens(1) }),
      // After it ended: the balance is below zero.
      request(start + 11_000, { units: tokens(1) }),
    ],
    limits,
    () => 0,
  )
  t.equal(tenant!.would_refuse, 1, 'only the request after the long answer ended')
  t.equal(tenant!.first_refusal_at, new Date(start + 11_000).toISOString())
  t.same(tenant!.units, { requests: 4, tokens: 153 })
  t.same(tenant!.peak_second, { at: new Date(start).toISOString(), requests: 1 })
})

t.test('held and replayed a sub-account at a time: the same answer as each sub-account alone', async (t) => {
  // More requests than the replay holds at once (20,000), three sub-accounts interleaved, long
  // answers whose units are charged after a batch ends, and a month boundary on the way.
  // Each limit binds: the request rate now and then, the request quota late in November, and the
  // tokens' rate and quota through their charges, many of them due after a batch has ended.
  const limits: Limits = {
    rate: { requests: 40, perSeconds: 60 },
    monthlyQuota: { requests: 9_000 },
    meters: [{ meter: 'tokens', rate: { requests: 60, perSeconds: 60 }, monthlyQuota: { requests: 12_000 } }],
  }
  const tenants = ['sub-a', 'sub-b', 'sub-c']
  const start = DEC - 3 * 3_600_000
  const requests = Array.from({ length: 45_000 }, (_, i) =>
    request(start + i * 500, {
      tenantId: tenants[(i * 7) % 3]!,
      endMs: start + i * 500 + (i % 10 === 0 ? 30_000 : 20),
      units: i % 4 === 0 ? { tokens: i % 13 } : null,
    }),
  )
  const useBefore: UseBefore = (tenant, _meter, month) => (month === '2026-11' ? tenants.indexOf(tenant) * 1_000 : 0)
  const together = await simulateLimits(requests, limits, useBefore)
  t.equal(together.length, 3)
  for (const tenant of tenants) {
    const [alone] = await simulateLimits(
      requests.filter((r) => r.tenantId === tenant),
      limits,
      useBefore,
    )
    t.same(
      together.find((entry) => entry.sub_account_id === tenant),
      alone,
      `${tenant}: as replayed alone`,
    )
  }
  const refused = together.reduce((sum, entry) => sum + entry.would_refuse, 0)
  t.ok(refused > 0 && refused < requests.length, `some refused, not all (${refused})`)
  // The same requests without tokens: fewer refused, so the charges decided some.
  const untokened = await simulateLimits(
    requests.map((r) => ({ ...r, units: null })),
    limits,
    useBefore,
  )
  const refusedWithout = untokened.reduce((sum, entry) => sum + entry.would_refuse, 0)
  t.ok(refusedWithout < refused, `the tokens' limits refused some (${refused - refusedWithout})`)
})

t.test('thousands of sub-accounts let the event loop turn while they are replayed', async (t) => {
  // Each one's first request waits for its month's use: promises only, which never let a timer or
  // a socket in. The replay lets a turn through every TENANTS_A_TURN sub-accounts.
  const limits: Limits = { rate: null, monthlyQuota: { requests: 5 } }
  const requests = Array.from({ length: 4 * TENANTS_A_TURN }, (_, i) => request(DEC + i, { tenantId: `sub-${i}` }))
  let turns = 0
  let counting = true
  const count = () => {
    if (!counting) return
    turns++
    setImmediate(count)
  }
  setImmediate(count)
  const tenants = await simulateLimits(requests, limits, () => 0)
  counting = false
  t.equal(tenants.length, 4 * TENANTS_A_TURN, 'every sub-account replayed')
  t.ok(turns >= 3, `the event loop turned ${turns} times meanwhile`)
})
