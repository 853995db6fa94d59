// Shadow limits in the limiter (src/limits/), embedded, on a fake clock: a shadow limit decides
// as an enforced one would, for admitted requests only, and refuses nothing; what it would refuse
// takes nothing of it; it sends no RateLimit fields; a refund gives back only what it took.
import t from 'tap'
import { Limiter } from '../../src/limits/limiter.js'
import type { Limits, LimitSubject } from '../../src/limits/types.js'

const NOV = Date.UTC(2026, 10, 22, 12, 0, 0)
function clock() {
  let at = NOV
  return { now: () => at, advance: (ms: number) => (at += ms) }
}
const embedded = (now: () => number) =>
  new Limiter({ redis: null, keyPrefix: 't:', loadMonthUse: async () => 0, now, sweepEveryMs: 0 })
const sub = (limits: Partial<Limits>): LimitSubject => ({
  tenantId: 'sub-1',
  level: 'sub_account',
  limits: { rate: null, monthlyQuota: null, ...limits },
})
const rate = (requests: number) => ({ requests, perSeconds: 60 })

t.test('beside an enforced rate: it marks what it would refuse, the enforced one refuses', async (t) => {
  const time = clock()
  const limiter = embedded(time.now)
  const subjects = [sub({ rate: rate(5), shadow: { rate: rate(2), monthlyQuota: null } })]
  const decisions = Array.from({ length: 6 }, () => limiter.admit(subjects))
  t.same(
    decisions.map((d) => d.allowed),
    [true, true, true, true, true, false],
    'the enforced rate of 5 decides',
  )
  t.same(
    decisions.map((d) => d.wouldRefuse ?? []),
    [[], [], ['sub_account.shadow.rate'], ['sub_account.shadow.rate'], ['sub_account.shadow.rate'], []],
    'the shadow rate of 2 would have refused the 3rd to the 5th; the 6th, refused, is not its to count',
  )
  t.same(decisions[5]!.violated, ['sub_account.rate'])
  for (const d of decisions)
    t.same(
      d.policies.map((p) => p.name),
      ['sub_account.rate'],
      'the RateLimit fields name the enforced rate only',
    )
  await limiter.close()
})

t.test('alone, it never refuses; what it would refuse takes nothing, and a refund gives nothing back', async (t) => {
  const time = clock()
  const limiter = embedded(time.now)
  const subjects = [sub({ shadow: { rate: rate(2), monthlyQuota: null } })]
  const first = limiter.admit(subjects)
  t.same([first.allowed, first.wouldRefuse, first.policies], [true, undefined, []], 'no fields, nothing refused')
  limiter.admit(subjects)
  const third = limiter.admit(subjects)
  t.ok(third.allowed, 'never refused')
  t.same(third.wouldRefuse, ['sub_account.shadow.rate'])
  // The third is refused later by the gateway: its refund must not give the shadow a unit it never took.
  limiter.refund(subjects, 1, third.untaken)
  t.same(limiter.admit(subjects).wouldRefuse, ['sub_account.shadow.rate'], 'still spent: nothing was given back')
  time.advance(30_000) // half a window: one token back
  t.same(limiter.admit(subjects).wouldRefuse, undefined, 'refilled, it would pass again')
  await limiter.close()
})

t.test('a shadow quota in units: charged after, as an enforced one is', async (t) => {
  const time = clock()
  const limiter = embedded(time.now)
  const meters = [{ meter: 'tokens', rate: null, monthlyQuota: { requests: 100 } }]
  const subjects = [sub({ shadow: { rate: null, monthlyQuota: null, meters } })]
  await limiter.admitWhenWarm(subjects)
  limiter.charge(subjects, new Map([['tokens', 150]]))
  const next = limiter.admit(subjects)
  t.ok(next.allowed, 'never refused')
  t.same(next.wouldRefuse, ['sub_account.shadow.meters.tokens.monthly_quota'], 'past 100 tokens it would refuse')
  await limiter.close()
})
