// A grant's expiry against a lease call under way (src/limits/lease-renewal.ts), on a fake clock
// against a lease store whose answers the test gives by hand: the call was sent while the grant
// lived, so Redis answers it under the old balance. Its grant must not be spent after the expiry,
// on any replica: it goes back with the next call, which asks under the balance as it is now.
import t from 'tap'
import { limitRefusal } from '../../src/limits/answer.js'
import { creditedSubject, flush, limiterOnHand } from '../helpers/lease-hand-store.js'
import { until } from '../helpers/poll.js'

const NOV = Date.UTC(2026, 10, 10, 12, 0, 0)
const EXPIRY = NOV + 1_500
// 100 of its units were burned when the balance was read: past its expiry, it gives those 100.
const subjects = [creditedSubject([{ units: 1_000, left: 900, expiresAt: EXPIRY }])]

t.test('a lease granted under a balance that expired while its call was out is given back, not spent', async (t) => {
  let at = NOV
  const { limiter, store } = limiterOnHand(() => at)
  t.teardown(() => store.close(limiter))
  const first = limiter.admitWhenWarm(subjects)
  await flush()
  const opening = store.quotas.shift()!
  t.equal(opening.call.requests, 1_000, 'asked under the live grant')
  opening.answer({
    rebuild: false,
    granted: opening.call.wanted,
    used: 100 + opening.call.wanted,
    waitMs: 0,
    epoch: 'e1',
    inGrace: false,
  })
  t.ok((await first).allowed, 'admitted while the grant lives')

  // Past half the lease's life, a decision renews it in the background: the call is out at the expiry.
  at = NOV + 1_100
  t.ok(limiter.admit(subjects).allowed, 'admitted from the lease')
  await flush()
  t.equal(store.quotas.length, 1, 'a renewal is under way')
  const renewal = store.quotas.shift()!
  t.equal(renewal.call.requests, 1_000, 'sent under the live grant')

  at = EXPIRY
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
