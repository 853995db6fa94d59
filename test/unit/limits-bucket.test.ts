// The rate limit's token bucket and the quota's month (src/limits/) as plain functions.
import fc from 'fast-check'
import t from 'tap'
import { fullBucket, giveBack, msUntil, type Rate, refill, take } from '../../src/limits/bucket.js'
import { monthBounds, monthOf, monthSeconds, secondsToNextMonth } from '../../src/limits/month.js'

const TEN_PER_SECOND: Rate = { requests: 10, perSeconds: 1 }

t.test('a full bucket gives N at once, then refills at N per W', async (t) => {
  let state = fullBucket(TEN_PER_SECOND, 0)
  const first = take(state, TEN_PER_SECOND, 0, 25)
  t.equal(first.granted, 10, 'N at once, no more')
  state = first.state
  t.equal(take(state, TEN_PER_SECOND, 0, 1).granted, 0, 'empty')
  t.equal(msUntil(state, TEN_PER_SECOND, 0), 100, 'one token every 100 ms')
  t.equal(take(state, TEN_PER_SECOND, 250, 5).granted, 2, 'two and a half tokens after 250 ms: two whole ones')
  t.equal(refill(state, TEN_PER_SECOND, 60_000).tokens, 10, 'never above capacity')
  t.equal(msUntil(state, TEN_PER_SECOND, 0, 11), Number.POSITIVE_INFINITY, 'more than N never fit')
  t.same(refill(state, TEN_PER_SECOND, -5), state, 'a clock that goes back refills nothing')
})

t.test('giving back never makes more than N', async (t) => {
  const { state } = take(fullBucket(TEN_PER_SECOND, 0), TEN_PER_SECOND, 0, 4)
  t.equal(giveBack(state, TEN_PER_SECOND, 0, 4).tokens, 10)
  t.equal(giveBack(state, TEN_PER_SECOND, 0, 400).tokens, 10, 'capped')
  t.equal(giveBack(state, TEN_PER_SECOND, 0, -3).tokens, 6, 'nothing negative')
})

t.test('over any t seconds at most N + N·t/W pass, whatever the takes and gives back', async (t) => {
  const op = fc.record({
    after: fc.integer({ min: 0, max: 2_000 }),
    wanted: fc.integer({ min: 0, max: 50 }),
    returned: fc.integer({ min: 0, max: 50 }),
  })
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 1_000 }),
      fc.integer({ min: 1, max: 3_600 }),
      fc.array(op, { minLength: 1, maxLength: 80 }),
      (requests, perSeconds, ops) => {
        const rate = { requests, perSeconds }
        let state = fullBucket(rate, 0)
        let now = 0
        // What passed: tokens taken minus tokens given back, at each instant.
        const passed: { at: number; n: number }[] = []
        for (const { after, wanted, returned } of ops) {
          now += after
          const got = take(state, rate, now, wanted)
          state = got.state
          const back = Math.min(returned, got.granted)
          state = giveBack(state, rate, now, back)
          passed.push({ at: now, n: got.granted - back })
        }
        for (let i = 0; i < passed.length; i++) {
          let sum = 0
          for (let j = i; j < passed.length; j++) {
            sum += passed[j]!.n
            const seconds = (passed[j]!.at - passed[i]!.at) / 1000
            if (sum > requests + (requests * seconds) / perSeconds + 1e-9) return false
          }
        }
        return true
      },
    ),
    { numRuns: 300 },
  )
  t.pass('300 random runs')
})

t.test('UTC months', async (t) => {
  const nov = Date.UTC(2026, 10, 22, 12, 0, 0)
  t.equal(monthOf(nov), '2026-11')
  t.same(monthBounds(nov), { start: Date.UTC(2026, 10, 1), end: Date.UTC(2026, 11, 1) })
  t.equal(monthSeconds(nov), 30 * 86_400)
  t.equal(monthSeconds(Date.UTC(2028, 1, 10)), 29 * 86_400, 'a leap February')
  t.equal(monthOf(Date.UTC(2026, 11, 31, 23, 59, 59)), '2026-12')
  t.equal(secondsToNextMonth(Date.UTC(2026, 11, 31, 23, 59, 59, 500)), 1, 'at least 1')
  t.equal(secondsToNextMonth(Date.UTC(2026, 10, 30, 23, 0, 0)), 3_600)
})
