// A quota's or a credit's request that waited for a renewal and ran out of time (src/limits/
// limit-waits.ts), on a fake clock against a lease store whose answers the test gives by hand:
// Redis answered during the wait, yet the lease is still dry (the grant paid the debt of the
// answers that ended meanwhile, or came after its lease life on a slow process). A rate is then
// spent for now (its grant went to the requests ahead); a quota or a credit of 10^12 is not: it is
// spent only when an answer could not cover what was asked. Out of time so, the request is a 503 to
// retry, never a 402 credits_exhausted nor a 429 quota_exceeded.
import t from 'tap'
import { limitRefusal } from '../../src/limits/answer.js'
import type { LimitSubject } from '../../src/limits/types.js'
import { creditedSubject, flush, limiterOnHand } from '../helpers/lease-hand-store.js'

const NOV = Date.UTC(2026, 10, 10, 12, 0, 0)
function clock(start = NOV) {
  let at = start
  return { now: () => at, advance: (ms: number) => (at += ms) }
}
const TERA = 1_000_000_000_000
const credited = creditedSubject([{ units: TERA, left: TERA, expiresAt: null }])
const quoted: LimitSubject = {
  tenantId: 'sub-1',
  level: 'sub_account',
  limits: { rate: null, monthlyQuota: { requests: TERA } },
}
const tokens = (n: number) => new Map([['tokens', n]])

/** Answers the oldest quota call with all it asked for, of a month far from spent. */
function grantAll(store: ReturnType<typeof limiterOnHand>['store'], used: number): number {
  const pending = store.quotas.shift()
  if (pending === undefined) throw new Error('no quota call waits')
  const granted = pending.call.wanted
  pending.answer({ rebuild: false, granted, used: used + granted, waitMs: 0, epoch: 'e1', inGrace: false })
  return granted
}

t.test('a credit of 10^12 whose renewal paid the debt of the answers ended meanwhile: a 503, not a 402', async (t) => {
  const time = clock()
  const { limiter, store } = limiterOnHand(time.now)
  t.teardown(() => store.close(limiter))
  const subjects = [credited]
  const first = limiter.admitWhenWarm(subjects)
  await flush()
  grantAll(store, 0)
  t.ok((await first).allowed, 'admitted on its first lease')
  time.advance(2_001) // an idle lease life: the lease is spent no more, the limit is starved
  t.notOk(limiter.isWarm(subjects), 'dry, and not known to be spent: the next request waits')
  const waiting = limiter.admitWhenWarm(subjects, 30)
  await flush()
  const renewal = store.quotas[0]!.call
  // Answers of requests admitted before end while the renewal is out, and use more than it asks for.
  limiter.charge(subjects, tokens(renewal.wanted + 42))
  grantAll(store, 462_000)
  await flush()
  const decision = await waiting
  t.equal(decision.allowed, false, 'the lease is still dry: not admitted')
  t.equal(decision.undecided, true, 'the credits are not known to be used up')
  t.same([limitRefusal(decision).status, limitRefusal(decision).code], [503, 'store_unavailable'])
})

t.test('a monthly quota of 10^12 whose renewal came after its lease life: a 503, not a 429', async (t) => {
  const time = clock()
  const { limiter, store } = limiterOnHand(time.now)
  t.teardown(() => store.close(limiter))
  const subjects = [quoted]
  const first = limiter.admitWhenWarm(subjects)
  await flush()
  grantAll(store, 0)
  t.ok((await first).allowed, 'admitted on its first lease')
  time.advance(2_001)
  t.notOk(limiter.isWarm(subjects), 'dry, and not known to be spent: the next request waits')
  const waiting = limiter.admitWhenWarm(subjects, 30)
  await flush()
  // A process so slow that the answer is read after the life of the lease it grants.
  time.advance(2_001)
  grantAll(store, 462_000)
  await flush()
  const decision = await waiting
  t.equal(decision.allowed, false, 'the lease came expired: not admitted')
  t.equal(decision.undecided, true, 'the month is not known to be spent')
  t.same([limitRefusal(decision).status, limitRefusal(decision).code], [503, 'store_unavailable'])
})

t.test('a quota that an answer found spent is a 429 all the same', async (t) => {
  const time = clock()
  const { limiter, store } = limiterOnHand(time.now)
  t.teardown(() => store.close(limiter))
  const subjects: LimitSubject[] = [{ ...quoted, limits: { rate: null, monthlyQuota: { requests: 5 } } }]
  const first = limiter.admitWhenWarm(subjects, 30)
  await flush()
  store.quotas.shift()!.answer({ rebuild: false, granted: 0, used: 5, waitMs: 0, epoch: 'e1', inGrace: false })
  const decision = await first
  t.notOk(decision.undecided, 'known to be spent')
  t.same([limitRefusal(decision).status, limitRefusal(decision).code], [429, 'quota_exceeded'])
})

t.test("a quota's lease that ran out unspent goes back with the next call: a credit is not lost", async (t) => {
  // A limit's first lease is the cap (M/100: 10^10 of a credit of 10^12), and Redis counts every
  // unit granted as used until it is given back. A process stalled past the lease's life spends it
  // no more: unless it is given back, 1 % of the credit is gone at each stall, until a 402.
  const time = clock()
  const { limiter, store } = limiterOnHand(time.now)
  t.teardown(() => store.close(limiter))
  for (const subjects of [[credited], [quoted]]) {
    const first = limiter.admitWhenWarm(subjects)
    await flush()
    const lease = grantAll(store, 0)
    t.ok((await first).allowed, 'admitted on its first lease')
    t.equal(lease, TERA / 100, 'the cap: no demand known yet')
    time.advance(2_001) // a stall past the lease's life
    const next = limiter.admitWhenWarm(subjects)
    await flush()
    const renewal = store.quotas[0]!.call
    const unspent = subjects[0] === quoted ? lease - 1 : lease
    t.equal(renewal.returned, unspent, 'what was left of it is given back')
    grantAll(store, lease)
    t.ok((await next).allowed)
  }
})

t.test('a lease that ran out while Redis rebuilt the month is neither spent again nor given back there', async (t) => {
  // The copy Redis rebuilds counts what the replica keeps when it calls again (its lease held
  // then): a lease that ran out meanwhile is not in it. Kept in memory, the grant's answer made it
  // spendable again for a new life, and the next call gave it back to the new copy: that copy
  // counted less than was admitted, so as many requests passed the quota.
  const time = clock()
  const { limiter, store } = limiterOnHand(time.now)
  t.teardown(() => store.close(limiter))
  const subjects = [quoted]
  const first = limiter.admitWhenWarm(subjects)
  await flush()
  const lease = grantAll(store, 0)
  t.ok((await first).allowed)
  time.advance(1_500) // past half the lease's life: the next request renews it
  t.ok(limiter.admit(subjects, 1).allowed, 'admitted from the lease')
  await flush()
  t.equal(store.quotas.length, 1, 'a renewal is out')
  t.equal(store.quotas[0]!.call.keep, lease - 2)
  time.advance(600) // the lease runs out while the renewal is out
  store.quotas.shift()!.answer({ rebuild: true }) // Redis lost the month
  await flush()
  const again = store.quotas[0]!.call
  t.equal(again.keep, 0, 'the copy is made without the lease that ran out')
  const granted = again.wanted
  store.quotas.shift()!.answer({ rebuild: false, granted, used: granted, waitMs: 0, epoch: 'e2', inGrace: false })
  await flush()
  time.advance(2_001) // and the new lease runs out unspent
  const next = limiter.admitWhenWarm(subjects)
  await flush()
  t.equal(store.quotas[0]!.call.returned, granted, 'only what the new copy granted goes back to it')
  grantAll(store, 0)
  t.ok((await next).allowed)
})
