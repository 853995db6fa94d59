// A grant's expiry against a lease call under way (src/limits/lease-renewal.ts), on a fake clock
// against a lease store whose answers the test gives by hand: the call was sent while the grant
// lived, so Redis answers it under the old balance. Its grant must not be spent after the expiry,
// on any replica: it goes back with the next call, which asks under the balance as it is now,
// also when the call is sent again after a timeout, answered as the limiter closes, or answered
// by a month Redis rebuilt meanwhile (what goes back is the new copy's only).
import t, { type Test } from 'tap'
import { limitRefusal } from '../../src/limits/answer.js'
import { FORGET_AFTER_MS } from '../../src/limits/lease-terms.js'
import { creditedSubject, flush, limiterOnHand } from '../helpers/lease-hand-store.js'
import { until } from '../helpers/poll.js'

const NOV = Date.UTC(2026, 10, 10, 12, 0, 0)
/** An answer's fields besides its grant and use: copy e1 of the month, no wait. */
const E1 = { waitMs: 0, epoch: 'e1', inGrace: false }
const EXPIRY = NOV + 1_500
// 100 of its units were burned when the balance was read: past its expiry, it gives those 100.
const subjects = [creditedSubject([{ units: 1_000, left: 900, expiresAt: EXPIRY }])]
const tokens = (n: number) => new Map([['tokens', n]])

/**
 * A limiter on the test's clock (`clock` sets it), holding the opening lease of `subjects`' credit
 * granted at NOV under the live grant: 10 units (M/100), until NOV + 2,000.
 */
async function opened(t: Test) {
  let at = NOV
  const { limiter, store } = limiterOnHand(() => at)
  t.teardown(() => store.close(limiter))
  const first = limiter.admitWhenWarm(subjects)
  await flush()
  const opening = store.quotas.shift()!
  t.equal(opening.call.requests, 1_000, 'asked under the live grant')
  opening.answer({ rebuild: false, granted: opening.call.wanted, used: 100 + opening.call.wanted, ...E1 })
  t.ok((await first).allowed, 'admitted while the grant lives')
  return { limiter, store, clock: (ms: number) => (at = ms) }
}

/**
 * `opened`, then at NOV + 600 a renewal out: an answer's 9 tokens leave 1 unit, below half the
 * lease, so the renewal keeps that unit and asks for more. Redis would grant it `stale` units.
 */
async function renewalOut(t: Test) {
  const { limiter, store, clock } = await opened(t)
  clock(NOV + 600)
  limiter.charge(subjects, tokens(9))
  await flush()
  const renewal = store.quotas.shift()!
  t.same([renewal.call.requests, renewal.call.keep], [1_000, 1], 'a renewal under the live grant, keeping the unit')
  t.ok(renewal.call.wanted > 0, `asking for more (${renewal.call.wanted})`)
  return { limiter, store, clock, renewal, stale: renewal.call.wanted }
}

/**
 * `renewalOut`, whose renewal then times out (Redis paused: it runs the call later, under the live
 * grant), the limit on its own; past the grant's expiry, it refuses.
 */
async function timedOutPastExpiry(t: Test) {
  const out = await renewalOut(t)
  out.renewal.fail(new Error('timeout'))
  await flush()
  out.clock(EXPIRY + 10)
  t.notOk(out.limiter.admit(subjects).allowed, 'refused on its own after the expiry')
  /**
   * At `ms`, a sweep sends the quota's report again as it was (quota-reports.ts), once a probe's
   * wait has passed; Redis had applied it before the expiry, and answers that grant again.
   */
  const resentAt = async (ms: number) => {
    out.clock(ms)
    out.limiter.sweep()
    await flush()
    const again = out.store.quotas.shift()!
    t.equal(again.call.report, out.renewal.call.report, 'the same report, sent again')
    again.answer({ rebuild: false, granted: out.stale, used: 110 + out.stale, ...E1 })
    await flush()
  }
  return { ...out, resentAt }
}

t.test('a lease granted under a balance that expired while its call was out is given back, not spent', async (t) => {
  const { limiter, store, clock } = await opened(t)
  // Past half the lease's life, a decision renews it in the background: the call is out at the expiry.
  clock(NOV + 1_100)
  t.ok(limiter.admit(subjects).allowed, 'admitted from the lease')
  await flush()
  t.equal(store.quotas.length, 1, 'a renewal is under way')
  const renewal = store.quotas.shift()!
  t.equal(renewal.call.requests, 1_000, 'sent under the live grant')

  clock(EXPIRY)
  const after = limiter.admitWhenWarm(subjects, 5_000)
  await flush()
  // Redis ran the call as it was sent: under the old balance, it grants what was wanted.
  const stale = Math.max(1, renewal.call.wanted)
  renewal.answer({ rebuild: false, granted: stale, used: 300, waitMs: 0, epoch: 'e1', inGrace: false })
  // A request the limit cannot pass asks nothing itself: the decision after the wait sends the call.
  t.ok(await until(5_000, async () => store.quotas.length > 0), 'a new call goes out under the balance as it is now')
  const next = store.quotas.shift()
  t.equal(next?.call.requests, 100, 'the expired grant gives what was burned of it when read')
  const returned = next?.call.returned ?? 0
  t.ok(returned >= stale, `the lease granted after the expiry goes back with it (${returned})`)
  next?.answer({ rebuild: false, granted: 0, used: 300 - returned, waitMs: 0, epoch: 'e1', inGrace: false })
  const decision = await after
  t.notOk(decision.allowed, 'refused at the expiry')
  t.notOk(decision.undecided, 'known to be spent')
  t.same([limitRefusal(decision).status, limitRefusal(decision).code], [402, 'credits_exhausted'])
})

t.test('a report sent again after a timeout is judged by the terms it was first sent under', async (t) => {
  const { limiter, store, stale, resentAt } = await timedOutPastExpiry(t)
  await resentAt(NOV + 2_300)
  t.notOk(limiter.admit(subjects).allowed, 'its grant, made under the expired balance, is not spent')
  await flush()
  const next = store.quotas.shift()
  t.equal(next?.call.requests, 100, 'the next call asks under the balance as it is now')
  t.ok((next?.call.returned ?? 0) >= stale, `and gives the grant back (${next?.call.returned})`)
  next?.answer({ rebuild: false, granted: 0, used: 110, ...E1 })
})

t.test('what a cold limit holds to give back goes back when the limiter closes', async (t) => {
  const { limiter, store, renewal, stale, clock } = await renewalOut(t)
  clock(EXPIRY)
  t.notOk(limiter.admit(subjects).allowed, 'refused at the expiry: the unit held is to go back')
  const closing = limiter.close()
  await flush()
  // The renewal's answer comes as the limiter closes: granted under the old balance, to go back too.
  renewal.answer({ rebuild: false, granted: stale, used: 110 + stale, ...E1 })
  let returned = 0
  for (let i = 0; i < 5; i++) {
    await flush()
    for (const call of store.quotas.splice(0)) {
      returned += call.call.returned
      call.answer({ rebuild: false, granted: 0, used: 109, ...E1 })
    }
  }
  await closing
  t.equal(returned, 1 + stale, 'the unit held at the expiry and the stale grant, given back')
})

t.test("a month rebuilt while the call was out takes back its own grant, not the lost copy's lease", async (t) => {
  const { limiter, store, renewal, stale, clock } = await renewalOut(t)
  clock(EXPIRY)
  t.notOk(limiter.admit(subjects).allowed, 'refused at the expiry: the unit held is to go back')
  // Redis lost the month: the limiter reads it from Postgres and calls again with what it read.
  renewal.answer({ rebuild: true })
  t.ok(await until(5_000, async () => store.quotas.length > 0), 'the call goes again with the month read')
  const rebuilt = store.quotas.shift()!
  t.equal(rebuilt.call.report, renewal.call.report, 'the same report')
  t.ok(rebuilt.call.init >= 0, 'carrying the month as Postgres has it')
  t.equal(rebuilt.call.keep, 0, 'keeping nothing: the unit held was the lost copy’s')
  // The new copy, e2, grants under the balance the call was first sent under: stale, to go back.
  rebuilt.answer({ rebuild: false, granted: stale, used: stale, waitMs: 0, epoch: 'e2', inGrace: false })
  await flush()
  t.notOk(limiter.admit(subjects).allowed, 'the stale grant is not spent')
  await flush()
  const next = store.quotas.shift()
  t.equal(next?.call.epoch, 'e2', 'the next call is to the new copy')
  t.equal(next?.call.returned, stale, 'giving back its grant only: the lost copy’s unit was never counted in e2')
  next?.answer({ rebuild: false, granted: 0, used: 0, waitMs: 0, epoch: 'e2', inGrace: false })
})

t.test('a stale grant a local limit holds to give back keeps the limit until it goes back', async (t) => {
  const { limiter, store, stale, resentAt } = await timedOutPastExpiry(t)
  // Idle past the time an unused limit is forgotten; its report still goes again, and is answered.
  await resentAt(NOV + 600 + FORGET_AFTER_MS + 1_000)
  // Forgotten now, the limit would take its grant, made under the old balance, with it.
  limiter.sweep()
  await flush()
  const back = store.quotas.shift()
  t.ok((back?.call.returned ?? 0) >= stale, `the next sweep gives the grant back (${back?.call.returned})`)
  back?.answer({ rebuild: false, granted: 0, used: 110, ...E1 })
})
