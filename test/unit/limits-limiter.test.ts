// The limiter's accounting (src/limits/) with a fake clock: in embedded mode, and against a lease
// store in memory whose answers the test gives by hand, so that every call and its arguments show.
import t from 'tap'
import { limitRefusal } from '../../src/limits/answer.js'
import { limitKeys } from '../../src/limits/keys.js'
import { Limiter } from '../../src/limits/limiter.js'
import { secondsToNextMonth } from '../../src/limits/month.js'
import type { LimitSubject, Limits } from '../../src/limits/types.js'
import type { RateCall } from '../../src/limits/lease-store.js'
import { flush, HandStore, limiterOnHand } from '../helpers/lease-hand-store.js'

const NOV = Date.UTC(2026, 10, 22, 12, 0, 0)

function clock(start = NOV) {
  let at = start
  return { now: () => at, advance: (ms: number) => (at += ms) }
}

const NONE: Limits = { rate: null, monthlyQuota: null }
const sub = (limits: Partial<Limits>): LimitSubject => ({
  tenantId: 'sub-1',
  level: 'sub_account',
  limits: { ...NONE, ...limits },
})
const account = (limits: Partial<Limits>): LimitSubject => ({
  tenantId: 'parent-1',
  level: 'account',
  limits: { ...NONE, ...limits },
})

function embedded(now: () => number, used = 0) {
  return new Limiter({ redis: null, keyPrefix: 't:', loadMonthUse: async () => used, now, sweepEveryMs: 0 })
}

t.test('policies in their order; a request that fails one limit takes from none', async (t) => {
  const time = clock()
  const limiter = embedded(time.now)
  const subjects = [
    account({ rate: { requests: 100, perSeconds: 1 }, monthlyQuota: { requests: 3 } }),
    sub({ rate: { requests: 4, perSeconds: 60 }, monthlyQuota: { requests: 1_000 } }),
  ]
  await limiter.warm(subjects)
  t.ok(limiter.isWarm(subjects), 'quotas read their month')
  for (let i = 0; i < 3; i++) t.ok(limiter.admit(subjects).allowed)
  const refused = limiter.admit(subjects)
  t.notOk(refused.allowed)
  t.same(refused.violated, ['account.monthly_quota'])
  t.equal(refused.retryAfterSeconds, secondsToNextMonth(NOV), 'until the next month')
  t.same(
    refused.policies.map((p) => [p.name, p.remaining]),
    [
      ['sub_account.rate', 1],
      ['sub_account.monthly_quota', 997],
      ['account.rate', 97],
      ['account.monthly_quota', 0],
    ],
    'in order, and the refused request took nothing from the limits that allowed it',
  )
  const raised = [account({ rate: { requests: 100, perSeconds: 1 }, monthlyQuota: { requests: 4 } }), subjects[1]!]
  t.ok(limiter.admit(raised).allowed, 'a raised quota applies at once')
  const both = limiter.admit(raised)
  t.same(both.violated, ['sub_account.rate', 'account.monthly_quota'], 'every refusing policy, in order')
  t.equal(both.retryAfterSeconds, secondsToNextMonth(NOV), 'the longest wait')
  await limiter.close()
})

t.test('a rate refusal says when the next token comes; a refund gives one back', async (t) => {
  const time = clock()
  const limiter = embedded(time.now)
  const subjects = [sub({ rate: { requests: 2, perSeconds: 10 } })]
  t.ok(limiter.admit(subjects).allowed)
  t.ok(limiter.admit(subjects).allowed)
  const refused = limiter.admit(subjects)
  t.same(refused.violated, ['sub_account.rate'])
  t.equal(refused.retryAfterSeconds, 5, 'one token every 5 s')
  time.advance(1_200)
  t.equal(limiter.admit(subjects).retryAfterSeconds, 4, '3.8 s left: 4')
  limiter.refund(subjects)
  t.ok(limiter.admit(subjects).allowed, 'the refunded token')
  time.advance(3_800)
  const passed = limiter.admit(subjects)
  t.ok(passed.allowed)
  t.same(passed.policies[0], { name: 'sub_account.rate', quota: 2, windowSeconds: 10, remaining: 0, resetSeconds: 10 })
  await limiter.close()
})

t.test('a cold limit refuses with Retry-After 1 while its first lease is fetched', async (t) => {
  const time = clock()
  const store = new HandStore()
  const limiter = new Limiter({
    redis: null,
    store,
    keyPrefix: 'p:',
    loadMonthUse: async () => 0,
    now: time.now,
    sweepEveryMs: 0,
  })
  const subjects = [sub({ rate: { requests: 100, perSeconds: 1 } })]
  t.notOk(limiter.isWarm(subjects))
  const cold = limiter.admit(subjects)
  t.same([cold.allowed, cold.violated, cold.retryAfterSeconds], [false, ['sub_account.rate'], 1])
  t.equal(store.rates.length, 1, 'one call')
  t.equal(limiter.admit(subjects).allowed, false, 'still refused while it is in flight')
  t.equal(store.rates.length, 1, 'never two calls in flight for one limit')
  const first = await store.rateAnswer(10, 80)
  t.match(first, { key: limitKeys.rate('p:', 'sub_account:sub-1'), requests: 100, perMs: 1_000, keep: 0, wanted: 10 })
  t.ok(limiter.isWarm(subjects))
  t.equal(limiter.admit(subjects).policies[0]!.remaining, 89, 'its lease (9 left) and the bucket as last seen (80)')
  await store.close(limiter)
})

t.test('leases: kept units go on being spent, the grant adds up, an expired lease is not spent', async (t) => {
  const time = clock()
  const store = new HandStore()
  const limiter = new Limiter({
    redis: null,
    store,
    keyPrefix: 'p:',
    loadMonthUse: async () => 0,
    now: time.now,
    sweepEveryMs: 0,
  })
  const subjects = [sub({ rate: { requests: 100, perSeconds: 1 } })]
  await Promise.all([limiter.warm(subjects), store.rateAnswer(10, 90)])
  let admitted = 0
  // 1 request a ms: the lease is sized to 100 ms of that, capped at N/10 = 10.
  while (store.rates.length === 0) {
    time.advance(1)
    if (limiter.admit(subjects).allowed) admitted++
  }
  t.equal(admitted, 5, 'a renewal goes out when half the target is left')
  t.match(store.rates[0]!.call, { keep: 5, wanted: 5 })
  for (let i = 0; i < 3; i++) if (limiter.admit(subjects).allowed) admitted++
  await store.rateAnswer(5, 85)
  t.equal(admitted, 8)
  for (let i = 0; i < 20; i++) if (limiter.admit(subjects).allowed) admitted++
  t.equal(admitted, 15, 'the 2 kept units left and the 5 granted: 7 more, no more')
  t.equal(store.rates.length, 1, 'the next renewal is in flight')
  time.advance(2_001)
  t.notOk(limiter.admit(subjects).allowed, 'nothing is spent after the lease life')
  await store.close(limiter)
})

t.test('lease size follows the demand; an idle lease shrinks to one unit, then is given back', async (t) => {
  const time = clock()
  const store = new HandStore()
  const limiter = new Limiter({
    redis: null,
    store,
    keyPrefix: 'p:',
    loadMonthUse: async () => 0,
    now: time.now,
    sweepEveryMs: 0,
  })
  const subjects = [sub({ rate: { requests: 10_000, perSeconds: 1 } })]
  await Promise.all([limiter.warm(subjects), store.rateAnswer(1_000, 0)])
  t.equal(store.rates.length, 0)
  // 1 request every 10 ms: 0.1 a ms, so 10 over the 100 ms a lease covers.
  let wanted = -1
  for (let i = 0; i < 200 && wanted < 0; i++) {
    time.advance(10)
    limiter.admit(subjects)
    if (store.rates.length > 0) wanted = (await store.rateAnswer(0, 0)).wanted
  }
  t.ok(wanted >= 0 && wanted <= 10, `wanted ${wanted}: sized to the demand, not the cap of 1,000`)
  // A burst: 10 a ms.
  await Promise.all([limiter.warm(subjects), store.rates.length > 0 ? store.rateAnswer(50, 0) : null])
  let big = -1
  for (let ms = 0; ms < 2_000 && big < 500; ms++) {
    time.advance(1)
    for (let i = 0; i < 10; i++) limiter.admit(subjects)
    if (store.rates.length > 0) big = (await store.rateAnswer(200, 0)).wanted
  }
  t.ok(big >= 500, `wanted ${big} under a burst of 10 a ms`)
  const held = limiter.admit(subjects).policies[0]!.remaining
  t.ok(held > 1)
  time.advance(1_000)
  limiter.sweep()
  const shrink = store.rates.shift()!
  t.match(shrink.call, { keep: 1, wanted: 0 }, 'idle: keeps one unit')
  t.ok(shrink.call.returned >= held - 2, `gives back the rest (${shrink.call.returned})`)
  shrink.answer({ granted: 0, tokens: 0, waitMs: 0, inGrace: false, epoch: 'e' })
  await flush()
  const later: RateCall[] = []
  for (let ms = 0; ms < 9_000; ms += 250) {
    time.advance(250)
    limiter.sweep()
    if (store.rates.length > 0) later.push(await store.rateAnswer(0, 0))
  }
  t.ok(later.length >= 4, `the unit kept is renewed while idle (${later.length} calls)`)
  t.match(
    later.slice(0, -1),
    later.slice(0, -1).map(() => ({ keep: 1, returned: 0, wanted: 0 })),
  )
  t.match(later.at(-1), { keep: 0, returned: 1, wanted: 0 }, 'forgotten: the last unit goes back')
  await store.close(limiter)
})

t.test('a refund is given back to the store, never spent again locally', async (t) => {
  const time = clock()
  const store = new HandStore()
  const limiter = new Limiter({
    redis: null,
    store,
    keyPrefix: 'p:',
    loadMonthUse: async () => 0,
    now: time.now,
    sweepEveryMs: 0,
  })
  const subjects = [sub({ rate: { requests: 10, perSeconds: 1 } })]
  await Promise.all([limiter.warm(subjects), store.rateAnswer(1, 0)])
  t.ok(limiter.admit(subjects).allowed)
  t.equal(store.rates.length, 1, 'the lease of one ran out: a call is out')
  limiter.refund(subjects)
  t.notOk(limiter.admit(subjects).allowed, 'the refunded unit is not spent here')
  await store.rateAnswer(0, 0)
  time.advance(20)
  limiter.admit(subjects)
  t.equal(store.rates[0]?.call.returned, 1, 'it goes back with the next call')
  await store.close(limiter)
})

t.test('an empty answer: Retry-After from its wait, and no call before it', async (t) => {
  const time = clock()
  const store = new HandStore()
  const limiter = new Limiter({
    redis: null,
    store,
    keyPrefix: 'p:',
    loadMonthUse: async () => 0,
    now: time.now,
    sweepEveryMs: 0,
  })
  const subjects = [sub({ rate: { requests: 1, perSeconds: 3_600 } })]
  await Promise.all([limiter.warm(subjects), store.rateAnswer(0, 0, 2_500)])
  const refused = limiter.admit(subjects)
  t.same([refused.allowed, refused.retryAfterSeconds], [false, 3])
  t.equal(store.rates.length, 0, 'no call before the wait (at most 1 s) is over')
  time.advance(1_000)
  limiter.admit(subjects)
  t.equal(store.rates.length, 1)
  await store.close(limiter)
})

t.test('Redis failing: degraded, each limit on its own from its last state, reported on recovery', async (t) => {
  const time = clock()
  const store = new HandStore()
  const seen: boolean[] = []
  const limiter = new Limiter({
    redis: null,
    store,
    keyPrefix: 'p:',
    loadMonthUse: async () => 0,
    now: time.now,
    sweepEveryMs: 0,
    metrics: { degraded: (v) => seen.push(v) },
  })
  const subjects = [sub({ monthlyQuota: { requests: 10 } })]
  const warming = limiter.warm(subjects)
  await flush()
  store.quotas.shift()!.answer({ rebuild: false, granted: 1, used: 7, waitMs: 0, epoch: 'e1', inGrace: false })
  await warming
  t.ok(limiter.admit(subjects).allowed, 'the lease of one')
  const unanswered = store.quotas.shift()!
  unanswered.fail(new Error('down'))
  await flush()
  t.ok(limiter.degraded)
  let admitted = 0
  for (let i = 0; i < 10; i++) if (limiter.admit(subjects).allowed) admitted++
  t.equal(admitted, 3, '7 used as Redis last counted: 3 left')
  const refused = limiter.admit(subjects)
  t.equal(refused.retryAfterSeconds, secondsToNextMonth(NOV))
  time.advance(1_000)
  limiter.admit(subjects)
  // Redis may have run the unanswered call: it goes again as it was, its report named the same.
  const probe = store.quotas.shift()!
  t.same(probe.call, unanswered.call, 'the unanswered call is sent again, as it was')
  probe.answer({ rebuild: false, granted: 0, used: 7, waitMs: 0, epoch: 'e1', inGrace: false })
  await flush()
  t.notOk(limiter.degraded)
  time.advance(20)
  limiter.sweep()
  const report = store.quotas.shift()!
  t.match(report.call, { extra: 3, epoch: 'e1' }, 'then what it admitted on its own is reported')
  t.not(report.call.report, unanswered.call.report, 'in a report of its own')
  report.answer({ rebuild: false, granted: 0, used: 10, waitMs: 0, epoch: 'e1', inGrace: false })
  await flush()
  t.same(seen, [true, false])
  await store.close(limiter)
})

t.test('a quota Redis lost is read from Postgres and sent again', async (t) => {
  const time = clock()
  const store = new HandStore()
  const asked: string[] = []
  const limiter = new Limiter({
    redis: null,
    store,
    keyPrefix: 'p:',
    loadMonthUse: async (subject, month) => {
      asked.push(`${subject.level}:${subject.tenantId}:${month}`)
      return 42
    },
    now: time.now,
    sweepEveryMs: 0,
  })
  const subjects = [account({ monthlyQuota: { requests: 1_000 } })]
  const warming = limiter.warm(subjects)
  await flush()
  store.quotas.shift()!.answer({ rebuild: true })
  await flush()
  await flush()
  const again = store.quotas.shift()!
  t.match(again.call, { key: limitKeys.quota('p:', 'account:parent-1', '2026-11'), init: 42 })
  again.answer({ rebuild: false, granted: 10, used: 52, waitMs: 0, epoch: 'e', inGrace: false })
  await warming
  t.same(asked, ['account:parent-1:2026-11'])
  t.equal(limiter.admit(subjects).policies[0]!.remaining, 957)
  await store.close(limiter)
})

t.test('one failed call: every shared limit goes on on its own, from its lease and the bucket last seen', async (t) => {
  const time = clock()
  const store = new HandStore()
  const limiter = new Limiter({
    redis: null,
    store,
    keyPrefix: 'p:',
    loadMonthUse: async () => 0,
    now: time.now,
    sweepEveryMs: 0,
  })
  const rated = [sub({ rate: { requests: 10, perSeconds: 60 } })]
  const quoted = [account({ monthlyQuota: { requests: 5 } })]
  await Promise.all([limiter.warm(rated), store.rateAnswer(1, 3)])
  const warming = limiter.warm(quoted)
  await flush()
  store.quotas.shift()!.fail(new Error('down'))
  await warming
  t.ok(limiter.degraded)
  let admitted = 0
  for (let i = 0; i < 10; i++) if (limiter.admit(rated).allowed) admitted++
  t.equal(admitted, 4, 'its lease of 1 and the 3 tokens the bucket had')
  t.equal(store.rates.length, 0, 'no call before the probe is due')
  await store.close(limiter)
})

t.test('a dry lease within the retry time of an answer: the request waits on a timer, not in a loop', async (t) => {
  let reads = 0
  const time = clock()
  // A clock that moves only when the test says would hold a spinning request forever: it jumps a
  // second every 100,000 reads, so that one ends (and the test fails rather than hangs).
  const now = () => {
    if (++reads % 100_000 === 0) time.advance(1_000)
    return time.now()
  }
  const store = new HandStore()
  const limiter = new Limiter({
    redis: null,
    store,
    keyPrefix: 'p:',
    loadMonthUse: async () => 0,
    now,
    sweepEveryMs: 0,
  })
  const subjects = [sub({ rate: { requests: 100_000, perSeconds: 1 } })]
  await Promise.all([limiter.warm(subjects), store.rateAnswer(2)])
  t.ok(limiter.admit(subjects).allowed, 'one unit spent, a renewal sent')
  t.ok(limiter.admit(subjects).allowed, 'the other spent while it is under way')
  await store.rateAnswer(0, 0, 0)
  // An idle second: the sweep reports the unit spent, asking for nothing; its answer grants
  // nothing, which says nothing of the limit, and no call may follow for 10 ms.
  time.advance(1_000)
  limiter.sweep()
  t.match(await store.rateAnswer(0, 50), { keep: 0, wanted: 0 })
  t.notOk(limiter.isWarm(subjects), 'the lease is dry and the limit not known spent: the next request waits')
  reads = 0
  const eventLoop = new Promise<number>((resolve) => setImmediate(() => resolve(store.rates.length)))
  const decision = limiter.admitWhenWarm(subjects)
  t.equal(await eventLoop, 0, 'the event loop goes on while the request waits, and no call went early')
  t.ok(reads < 1_000, `a few clock reads, not a loop (${reads})`)
  time.advance(10)
  while (store.rates.length === 0) await new Promise((resolve) => setTimeout(resolve, 2))
  await store.rateAnswer(10, 40)
  t.ok((await decision).allowed, 'then the renewal, and the request admitted from it')
  await store.close(limiter)
})

t.test('a spent quota: the requests after its empty answer are refused from memory, not made to wait', async (t) => {
  const time = clock()
  const store = new HandStore()
  const limiter = new Limiter({
    redis: null,
    store,
    keyPrefix: 'p:',
    loadMonthUse: async () => 0,
    now: time.now,
    sweepEveryMs: 0,
  })
  const subjects = [account({ monthlyQuota: { requests: 5 } })]
  const spent = { rebuild: false as const, granted: 0, used: 5, waitMs: 0, epoch: 'e1', inGrace: false }
  const warming = limiter.warm(subjects)
  await flush()
  store.quotas.shift()!.answer(spent)
  await warming
  t.ok(limiter.isWarm(subjects), 'Redis just said the month is spent: decided from memory')
  const refused = limiter.admit(subjects)
  t.same([refused.allowed, refused.violated], [false, ['account.monthly_quota']])
  t.equal(store.quotas.length, 0, 'and no call before the next may go')
  time.advance(10)
  t.ok(limiter.isWarm(subjects), 'then too: a spent limit never makes a request wait')
  t.notOk(limiter.admit(subjects).allowed, 'refused from memory')
  t.equal(store.quotas.length, 1, 'and the next call goes out in the background')
  store.quotas.shift()!.answer(spent)
  await flush()
  t.ok(limiter.isWarm(subjects), 'spent again: from memory again')
  t.notOk(limiter.admit(subjects).allowed)
  await store.close(limiter)
})

t.test('a rate past its limit: a dry lease refuses at once while the next is fetched ahead', async (t) => {
  // No waiting (docs/internals.md, "A dry lease"): at twice its rate a tenant's lease runs dry
  // most of the time while Redis may hold units again; its requests used to wait for each renewal
  // (starved).
  const time = clock()
  const store = new HandStore()
  const limiter = new Limiter({
    redis: null,
    store,
    keyPrefix: 'p:',
    loadMonthUse: async () => 0,
    now: time.now,
    sweepEveryMs: 0,
  })
  const subjects = [sub({ rate: { requests: 100, perSeconds: 1 } })]
  // The first lease: 2 of the 10 asked for, the bucket drained (its next 5 tokens in 50 ms).
  await Promise.all([limiter.warm(subjects), store.rateAnswer(2, 0, 50)])
  t.ok(limiter.admit(subjects).allowed)
  t.equal(store.rates.length, 1, 'the next lease is fetched ahead, with a unit still held')
  t.ok(limiter.admit(subjects).allowed)
  const dry = limiter.admit(subjects)
  t.same([dry.allowed, dry.retryAfterSeconds], [false, 1], 'dry: refused at once, Retry-After from the wait')
  time.advance(60)
  t.ok(limiter.isWarm(subjects), "past the answer's wait, the limit is still reached: no request waits")
  t.notOk(limiter.admit(subjects).allowed, 'refused at once while the fetch is under way')
  t.equal(store.rates.length, 1, 'one call in flight, no other')
  await store.rateAnswer(3, 0, 20)
  let admitted = 0
  for (let i = 0; i < 5; i++) if (limiter.admit(subjects).allowed) admitted++
  t.equal(admitted, 3, 'served from the lease fetched ahead, the rest refused')
  // A moment later an answer covers all it asked, and more is left (the refill of a stall).
  const spend = () => {
    let passed = 0
    while (limiter.admit(subjects).allowed) passed++
    return passed
  }
  t.ok(store.rates[0]!.call.wanted > 0, 'a renewal is out')
  await store.rateAnswer(store.rates[0]!.call.wanted, 50)
  t.ok(spend() > 0)
  t.equal(store.rates.length, 1, 'and the next one')
  t.ok(limiter.isWarm(subjects), 'within a second of the last short answer: refused at once, not awaited')
  time.advance(1_000)
  await store.rateAnswer(store.rates[0]!.call.wanted, 80)
  t.ok(spend() > 0)
  t.notOk(limiter.isWarm(subjects), 'a second after it, an answer that covered the ask: back under, a burst waits')
  await store.close(limiter)
})

t.test('a limit reached, then left alone past its Retry-After: the next request waits, not refused', async (t) => {
  // No answer comes while nobody asks, so what the last one said grows old: a client that stopped
  // when refused and comes back as told finds the bucket refilled, and must not be refused for it.
  const time = clock()
  const store = new HandStore()
  const limiter = new Limiter({
    redis: null,
    store,
    keyPrefix: 'p:',
    loadMonthUse: async () => 0,
    now: time.now,
    sweepEveryMs: 0,
  })
  const subjects = [sub({ rate: { requests: 100, perSeconds: 1 } })]
  await Promise.all([limiter.warm(subjects), store.rateAnswer(2, 0, 50)])
  while (limiter.admit(subjects).allowed);
  t.ok(limiter.isWarm(subjects), 'reached: refused at once')
  await store.rateAnswer(0, 0, 1_000)
  time.advance(2_000)
  t.notOk(limiter.isWarm(subjects), 'two seconds later: the next request waits for a lease')
  await store.close(limiter)
})

t.test('a reached limit is not reached any more in a new month, or once its figures change', async (t) => {
  // Reached as the month ends (or under the old figures): what Redis says of the new month (or the
  // new limit) decides afresh, and a burst that empties its first lease waits for the renewal.
  const time = clock(Date.UTC(2026, 10, 30, 23, 59, 59, 500))
  const store = new HandStore()
  const limiter = new Limiter({
    redis: null,
    store,
    keyPrefix: 'p:',
    loadMonthUse: async () => 0,
    now: time.now,
    sweepEveryMs: 0,
  })
  const quota = (requests: number) => [account({ monthlyQuota: { requests } })]
  const answerQuota = async (granted: number, used: number) => {
    await flush()
    const pending = store.quotas.shift()!
    pending.answer({ rebuild: false, granted, used, waitMs: 0, epoch: 'e', inGrace: false })
    await flush()
    return pending.call
  }
  const spent = limiter.warm(quota(5))
  await answerQuota(0, 5)
  await spent
  t.ok(limiter.isWarm(quota(5)), 'November is spent: refused from memory')
  time.advance(600)
  t.notOk(limiter.isWarm(quota(5)), 'December: cold, its first lease awaited')
  const december = limiter.warm(quota(5))
  t.match(await answerQuota(1, 1), { key: limitKeys.quota('p:', 'account:parent-1', '2026-12') })
  await december
  t.ok(limiter.admit(quota(5)).allowed, "December's first unit")
  t.notOk(limiter.isWarm(quota(5)), 'its lease spent by a burst, December not reached: the next request waits')
  await answerQuota(0, 5)
  t.ok(limiter.isWarm(quota(5)), 'then December is spent too')
  const raising = limiter.warm(quota(50))
  const raised = await answerQuota(1, 6)
  t.equal(raised.requests, 50, 'a raised quota asks afresh')
  await raising
  t.ok(limiter.admit(quota(50)).allowed)
  t.notOk(limiter.isWarm(quota(50)), 'and is not taken for reached: a burst waits for its renewal')
  await store.close(limiter)
})

t.test("embedded: a new tenant's first request waits for its month's use from Postgres", async (t) => {
  // A read of 40 ms: longer than the three rounds of a millisecond warm made when it waited on
  // lease calls only (there are none in embedded mode), which refused the request quota_exceeded.
  const limiter = new Limiter({
    redis: null,
    keyPrefix: 't:',
    loadMonthUse: () => new Promise((done) => setTimeout(() => done(3), 40)),
    sweepEveryMs: 0,
  })
  t.teardown(() => limiter.close())
  const decision = await limiter.admitWhenWarm([sub({ monthlyQuota: { requests: 40 } })])
  t.equal(decision.allowed, true, 'admitted')
  t.equal(decision.policies[0]?.remaining, 36, '3 used before it, 1 by it')
})

/** A read of the month's use that comes back only when told: the limiter's close waits for it. */
function heldRead() {
  let answer = () => {}
  const answered = new Promise<number>((done) => (answer = () => done(0)))
  return { read: () => answered, answer }
}

t.test('a wait whose timer ends before the clock says so is undecided too, not a 429', async (t) => {
  // Under load a timer fires before Date.now() reaches its end (libuv counts from the start of the
  // loop's turn): the wait is over all the same. Here the clock stands still.
  const held = heldRead()
  const limiter = new Limiter({
    redis: null,
    keyPrefix: 't:',
    loadMonthUse: held.read,
    now: () => 1_000_000,
    sweepEveryMs: 0,
  })
  t.teardown(() => {
    held.answer()
    return limiter.close()
  })
  const decision = await limiter.admitWhenWarm([sub({ monthlyQuota: { requests: 40 } })], 50)
  t.equal(decision.undecided, true, 'not known to be over')
  t.equal(limitRefusal(decision).code, 'store_unavailable')
})

t.test('a limit not read within the wait is undecided: a 503 to retry, not a 429', async (t) => {
  const held = heldRead()
  const limiter = new Limiter({
    redis: null,
    keyPrefix: 't:',
    loadMonthUse: held.read,
    sweepEveryMs: 0,
  })
  t.teardown(() => {
    held.answer()
    return limiter.close()
  })
  const decision = await limiter.admitWhenWarm([sub({ monthlyQuota: { requests: 40 } })], 50)
  t.equal(decision.allowed, false)
  t.equal(decision.undecided, true, 'not known to be over')
  const refusal = limitRefusal(decision)
  t.equal(refusal.code, 'store_unavailable')
  t.equal(refusal.status, 503)
  t.match(refusal.message, /could not be read in time/)
})

t.test('a lease a burst emptied, its renewal not answered within the wait: a 503, not a 429', async (t) => {
  // docs/api.md: a burst that empties a replica's lease while the limit is not reached waits for
  // the renewal as a cold limit's first request does, and is refused 503 when none comes in time.
  const time = clock()
  const { limiter, store } = limiterOnHand(time.now)
  t.teardown(() => store.close(limiter))
  const subjects = [sub({ rate: { requests: 100, perSeconds: 1 } })]
  await Promise.all([limiter.warm(subjects), store.rateAnswer(10, 90)])
  t.ok(limiter.admit(subjects).allowed)
  // An idle lease life: what was left of the lease is spent no more, and Redis had 90.
  time.advance(2_001)
  t.notOk(limiter.isWarm(subjects), 'dry, and the limit not known to be reached: the next request waits')
  // Its renewal is never answered (a stalled Redis); the wait's timer ends it.
  const decision = await limiter.admitWhenWarm(subjects, 30)
  t.equal(decision.allowed, false)
  t.equal(decision.undecided, true, 'not known to be over')
  t.equal(limitRefusal(decision).status, 503)
  t.equal(limitRefusal(decision).code, 'store_unavailable')
})

t.test('out of time with a starved rate and a spent quota: a 429 of the quota, not a 503', async (t) => {
  // One limit that refused is known to be reached: the request would be refused whatever the
  // other's renewal said, and a 503 would send its client back every second to a spent month.
  const time = clock()
  const { limiter, store } = limiterOnHand(time.now)
  t.teardown(() => store.close(limiter))
  const rate = sub({ rate: { requests: 100, perSeconds: 1 } })
  const quota = account({ monthlyQuota: { requests: 5 } })
  await Promise.all([limiter.warm([rate]), store.rateAnswer(10, 90)])
  time.advance(2_001) // the rate's lease spent no more: starved
  const warming = limiter.warm([quota])
  await flush()
  store.quotas.shift()!.answer({ rebuild: false, granted: 0, used: 5, waitMs: 0, epoch: 'e1', inGrace: false })
  await warming
  const decision = await limiter.admitWhenWarm([rate, quota], 30)
  t.same(decision.violated, ['sub_account.rate', 'account.monthly_quota'], 'both refused it')
  t.notOk(decision.undecided, 'the quota is known to be spent')
  t.same([limitRefusal(decision).status, limitRefusal(decision).code], [429, 'quota_exceeded'])
})

t.test('a lease a burst emptied, renewed within the wait for the requests ahead: a 429, not a 503', async (t) => {
  // Redis answered while this request waited, and what it granted went to the requests ahead of
  // it: the limit is spent for now, not unknown, so the refusal is the limit's own 429.
  const time = clock()
  const { limiter, store } = limiterOnHand(time.now)
  t.teardown(() => store.close(limiter))
  const subjects = [sub({ rate: { requests: 100, perSeconds: 1 } })]
  await Promise.all([limiter.warm(subjects), store.rateAnswer(10, 90)])
  time.advance(2_001) // an idle lease life: starved
  const ahead = limiter.admitWhenWarm(subjects, 200)
  const behind = limiter.admitWhenWarm(subjects, 200)
  await flush()
  const renewal = store.rates[0]!.call
  await store.rateAnswer(renewal.wanted, 0)
  t.ok((await ahead).allowed, 'the request ahead takes the renewal')
  const decision = await behind
  t.equal(decision.allowed, false)
  t.notOk(decision.undecided, 'Redis answered during the wait')
  t.same([limitRefusal(decision).status, limitRefusal(decision).code], [429, 'rate_limited'])
})

t.test(
  "a quota's lease call failing while its month is read from Postgres: the request waits for the read",
  async (t) => {
    // Redis was found failing a moment before (another limit's call): a new quota reads its month
    // from Postgres and still asks Redis. When that call failed before the read came back, the wait
    // ended at once, and the request was refused quota_exceeded by a quota nobody had read.
    const time = clock()
    const store = new HandStore()
    const held = heldRead()
    const limiter = new Limiter({
      redis: null,
      store,
      keyPrefix: 'p:',
      loadMonthUse: held.read,
      now: time.now,
      sweepEveryMs: 0,
      warmWaitMs: 10_000,
    })
    t.teardown(() => store.close(limiter))
    const rated = [sub({ rate: { requests: 10, perSeconds: 1 } })]
    const warming = limiter.warm(rated)
    await flush()
    store.rates.shift()!.fail(new Error('down'))
    await warming
    t.ok(limiter.degraded, 'Redis is taken for down')
    const quoted = [account({ monthlyQuota: { requests: 100 } })]
    let decided = false
    const deciding = limiter.admitWhenWarm(quoted).finally(() => (decided = true))
    await flush()
    store.quotas.shift()!.fail(new Error('down'))
    for (let i = 0; i < 5; i++) await flush()
    t.notOk(decided, 'still waiting for the month read from Postgres')
    held.answer()
    const decision = await deciding
    t.equal(decision.allowed, true, 'admitted on the month as Postgres counts it')
  },
)

t.test('embedded: a month that could not be read is a 503, and is read again a second later', async (t) => {
  const time = clock()
  let reads = 0
  const limiter = new Limiter({
    redis: null,
    keyPrefix: 't:',
    loadMonthUse: async () => {
      if (++reads === 1) throw new Error('postgres did not answer')
      return 5
    },
    now: time.now,
    sweepEveryMs: 0,
  })
  t.teardown(() => limiter.close())
  const quoted = [sub({ monthlyQuota: { requests: 40 } })]
  const first = await limiter.admitWhenWarm(quoted, 50)
  t.same([first.allowed, first.undecided], [false, true], 'not read: a 503 to retry, not a 429')
  t.equal(reads, 1, 'not read again before a second has passed')
  time.advance(1_000)
  const second = await limiter.admitWhenWarm(quoted, 5_000)
  t.equal(second.allowed, true, 'read again, and admitted')
  t.equal(second.policies[0]?.remaining, 34, '5 used before it, 1 by it')
})
