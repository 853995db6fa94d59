// A request's cost in the limiter (src/limits/, docs/api.md, Limits and quotas) with a fake clock,
// embedded and leased from a store answered by hand: a request of `units` takes that many from
// every rate and quota, passes only if each has them, is told to wait for them, gets them back on
// a refund, and one that can never pass asks nothing of the shared state.
import t from 'tap'
import { Limiter } from '../../src/limits/limiter.js'
import { secondsToNextMonth } from '../../src/limits/month.js'
import type { LimitSubject, Limits } from '../../src/limits/types.js'
import { flush, limiterOnHand } from '../helpers/lease-hand-store.js'

const NOV = Date.UTC(2026, 10, 22, 12, 0, 0)
const NONE: Limits = { rate: null, monthlyQuota: null }
const sub = (limits: Partial<Limits>): LimitSubject[] => [
  { tenantId: 'sub-1', level: 'sub_account', limits: { ...NONE, ...limits } },
]

function embedded() {
  let at = NOV
  const limiter = new Limiter({
    redis: null,
    keyPrefix: 't:',
    loadMonthUse: async () => 0,
    now: () => at,
    sweepEveryMs: 0,
  })
  return { limiter, advance: (ms: number) => (at += ms) }
}

t.test('a rate of 12 an hour: units of 5 until fewer are left, then units of 1; a refund gives 5 back', async (t) => {
  const { limiter } = embedded()
  const subjects = sub({ rate: { requests: 12, perSeconds: 3600 } })
  await limiter.warm(subjects)
  t.ok(limiter.admit(subjects, 5).allowed)
  const second = limiter.admit(subjects, 5)
  t.ok(second.allowed)
  t.equal(second.policies[0]!.remaining, 2, '10 of 12 taken')
  const refused = limiter.admit(subjects, 5)
  t.notOk(refused.allowed, 'only 2 left')
  t.equal(refused.retryAfterSeconds, 900, '3 more tokens, one every 300 s')
  t.ok(limiter.admit(subjects, 1).allowed, 'a cheaper request passes')
  limiter.refund(subjects, 5)
  t.ok(limiter.admit(subjects, 5).allowed, 'the 5 refunded pass again')
  t.ok(limiter.admit(subjects, 1).allowed, 'the 1 left before the refund')
  t.notOk(limiter.admit(subjects, 1).allowed, 'and then none')
  await limiter.close()
})

t.test('a request costing more than the bucket never passes, and waits a window', async (t) => {
  const { limiter, advance } = embedded()
  const subjects = sub({ rate: { requests: 3, perSeconds: 60 } })
  await limiter.warm(subjects)
  const refused = limiter.admit(subjects, 5)
  t.notOk(refused.allowed)
  t.equal(refused.retryAfterSeconds, 60)
  advance(3_600_000)
  t.notOk(limiter.admit(subjects, 5).allowed, 'not after an hour either')
  t.ok(limiter.admit(subjects, 3).allowed, 'the whole bucket at once does')
  await limiter.close()
})

t.test('a quota of 12: units of 5 until fewer are left, then the next month', async (t) => {
  const { limiter } = embedded()
  const subjects = sub({ monthlyQuota: { requests: 12 } })
  await limiter.warm(subjects)
  t.ok(limiter.admit(subjects, 5).allowed)
  t.ok(limiter.admit(subjects, 5).allowed)
  const refused = limiter.admit(subjects, 5)
  t.same(refused.violated, ['sub_account.monthly_quota'])
  t.equal(refused.retryAfterSeconds, secondsToNextMonth(NOV), 'the next month')
  t.ok(limiter.admit(subjects, 2).allowed, 'the 2 left, at once')
  t.equal(limiter.quotaUses()[0]!.used, 12)
  t.notOk(limiter.admit(subjects, 1).allowed)
  await limiter.close()
})

function leased() {
  let at = NOV
  return { ...limiterOnHand(() => at), advance: (ms: number) => (at += ms) }
}

t.test('leased: a request costing more than the lease holds asks for a renewal at once', async (t) => {
  const { limiter, store, advance } = leased()
  const subjects = sub({ rate: { requests: 100, perSeconds: 1 } })
  // The lease it asked for (a tenth of N), granted whole: not a limit reached.
  await Promise.all([limiter.warm(subjects), store.rateAnswer(10, 90)])
  for (let i = 0; i < 3; i++) {
    advance(1)
    t.ok(limiter.admit(subjects, 1).allowed, 'one of cost 1')
  }
  t.notOk(limiter.isWarm(subjects, 8), 'one of cost 8 cannot be decided from 7')
  const waiting = limiter.admitWhenWarm(subjects, 300, 8)
  await flush()
  t.equal(store.rates.length, 1, 'a lease call went out at once, though 7 left is above half the lease')
  t.ok(store.rates[0]!.call.wanted >= 1, 'asking for more')
  await store.rateAnswer(8, 84)
  t.ok((await waiting).allowed, 'the request of cost 8 passes on the renewal')
  await store.close(limiter)
})

t.test('leased: a cost above the rate is refused at once and takes nothing from Redis', async (t) => {
  const { limiter, store, advance } = leased()
  const subjects = sub({ rate: { requests: 10, perSeconds: 1 } })
  await Promise.all([limiter.warm(subjects), store.rateAnswer(1, 9)])
  for (let i = 0; i < 20; i++) {
    advance(1)
    t.ok(limiter.isWarm(subjects, 50), 'decided from memory, no wait')
    t.notOk(limiter.admit(subjects, 50).allowed)
  }
  await flush()
  t.ok(
    store.rates.every((pending) => pending.call.wanted <= 1),
    'no lease asks for the refused requests: the bucket is left to the others',
  )
  t.ok(limiter.admit(subjects, 1).allowed, 'a request of cost 1 still passes')
  await store.close(limiter)
})
