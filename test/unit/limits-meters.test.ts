// Limits in units in the limiter (src/limits/), on a fake clock against a lease store whose answers
// the test gives by hand, and embedded: a metered limit admits while a unit is held and is charged
// after; a long answer does not leave the next request waiting for Redis; a charge never undoes a
// change of limits read since; a month's debt is never sent to the next month; an embedded bucket
// in debt is not forgotten when idle.
import t from 'tap'
import { Limiter } from '../../src/limits/limiter.js'
import type { LimitSubject, MeterLimit } from '../../src/limits/types.js'
import { flush, limiterOnHand } from '../helpers/lease-hand-store.js'

const NOV = Date.UTC(2026, 10, 30, 23, 59, 0)
function clock(start = NOV) {
  let at = start
  return { now: () => at, advance: (ms: number) => (at += ms) }
}
const metered = (meter: Partial<MeterLimit>): LimitSubject => ({
  tenantId: 'sub-1',
  level: 'sub_account',
  limits: { rate: null, monthlyQuota: null, meters: [{ meter: 'tokens', rate: null, monthlyQuota: null, ...meter }] },
})
const tokens = (n: number) => new Map([['tokens', n]])

t.test('a long answer: the charge takes the last unit, and the next request does not wait', async (t) => {
  const time = clock()
  const { limiter, store } = limiterOnHand(time.now)
  const subjects = [metered({ rate: { requests: 1_000, perSeconds: 60 } })]
  t.notOk(limiter.isWarm(subjects), 'cold at first')
  const admitted = limiter.admitWhenWarm(subjects)
  await flush()
  await store.rateAnswer(1, 999)
  t.ok((await admitted).allowed, 'admitted with one unit held')
  await store.rateAnswer(0, 999) // the renewal it sent: nothing more for now
  // The answer streams for 2 s, with no other request meanwhile; then it reports 40 tokens.
  time.advance(2_000)
  limiter.charge(subjects, tokens(40))
  const call = store.rates[0]?.call
  t.equal(call?.debt, 40, 'the lease had expired: all 40 owed, sent at once')
  t.equal(call?.wanted, 1, 'and one unit asked for, to admit the next request')
  await store.rateAnswer(1, 958)
  t.ok(limiter.isWarm(subjects), 'the next request is decided from memory')
  t.ok(limiter.admit(subjects).allowed)
  await store.close(limiter)
})

t.test("a charge after a change of limits keeps the change (the request's subjects are older)", async (t) => {
  const time = clock()
  const { limiter, store } = limiterOnHand(time.now)
  const before = [metered({ rate: { requests: 1_000, perSeconds: 60 } })]
  const admitted = limiter.admitWhenWarm(before)
  await flush()
  await store.rateAnswer(10, 990)
  t.ok((await admitted).allowed)
  // A later request reads the new limit: the lease goes back and a fresh one comes.
  const after = [metered({ rate: { requests: 200, perSeconds: 60 } })]
  const next = limiter.admitWhenWarm(after)
  await flush()
  // The renewal the first admission sent is under way, under the old N: what it grants is given
  // back with a call under the new N, which the request waits for.
  const stale = await store.rateAnswer(5, 150)
  t.equal(stale.requests, 1_000, 'the call under way was sent under the old N')
  const fresh = await store.rateAnswer(5, 150)
  t.equal(fresh.requests, 200, 'the next is sent under the new one')
  t.ok(fresh.returned >= 5, `the grant to the old call goes back with it (${fresh.returned})`)
  t.ok((await next).allowed)
  t.match(limiter.admit(after).policies, [{ quota: 200 }])
  // The first request's answer ends, with its subjects as they were at its admission.
  limiter.charge(before, tokens(3))
  t.ok(limiter.isWarm(after), 'still warm under the new limit: nothing was given back')
  t.match(limiter.admit(after).policies, [{ quota: 200 }], 'the new N stands')
  await store.close(limiter)
})

t.test("a quota's debt of November is not sent to December's key", async (t) => {
  const time = clock()
  const { limiter, store } = limiterOnHand(time.now)
  const subjects = [metered({ monthlyQuota: { requests: 1_000 } })]
  const admitted = limiter.admitWhenWarm(subjects)
  await flush()
  store.quotas.shift()!.answer({ rebuild: false, granted: 1, used: 1, waitMs: 0, epoch: 'nov', inGrace: false })
  t.ok((await admitted).allowed)
  await flush()
  const renewal = store.quotas.shift()!
  t.match(renewal.call.key, /2026-11$/, "a renewal of November's lease in flight")
  // Charged while it is in flight: the debt waits for the next call, which December's first
  // request makes after the renewal failed.
  limiter.charge(subjects, tokens(300))
  t.equal(store.quotas.length, 0, 'the debt waits')
  time.advance(120_000)
  renewal.fail(new Error('Redis went away'))
  await flush()
  limiter.admit(subjects)
  await flush()
  t.ok(store.quotas.length > 0, "December's call")
  for (const pending of store.quotas) {
    t.match(pending.call.key, /2026-12$/, "December's key")
    t.equal(pending.call.extra, 0, "nothing of November's debt")
    t.equal(pending.call.keep, 0, "nor of November's spent units")
  }
  await store.close(limiter)
})

t.test('embedded: a bucket in debt is not forgotten when idle, so it does not come back full', async (t) => {
  const time = clock()
  const limiter = new Limiter({
    redis: null,
    keyPrefix: 't:',
    loadMonthUse: async () => 0,
    now: time.now,
    sweepEveryMs: 0,
  })
  const subjects = [metered({ rate: { requests: 50, perSeconds: 60 } })]
  t.ok(limiter.admit(subjects).allowed)
  limiter.charge(subjects, tokens(100))
  time.advance(11_000)
  limiter.sweep()
  const refused = limiter.admit(subjects)
  t.notOk(refused.allowed, 'still in debt 11 s later')
  t.same(refused.violated, ['sub_account.meters.tokens.rate'])
  time.advance(60_000)
  t.ok(limiter.admit(subjects).allowed, 'refilled past zero a window later')
  await limiter.close()
})
