// Prepaid credits' plain parts (docs/api.md, Credits): what a meter's grants give at an instant (a
// grant's rest gone at its expiry), the limiter's form of a credit limit, and the credits in force
// under a plan, meter by meter.
import t from 'tap'
import { credited } from '../../src/limits/credit-limit.js'
import { limitsOf } from '../../src/limits/subjects.js'
import { creditsInForce, limitsFromBody, storedLimits } from '../../src/shared/tenant-limits.js'

t.test('credited: live grants give their units until their expiry, then what was burned of them', async (t) => {
  const balance = {
    meter: 'tokens',
    settled: 7,
    live: [
      { units: 100, left: 40, expiresAt: 10_000 },
      { units: 50, left: 50, expiresAt: null },
    ],
    lowThresholdPercent: 10,
  }
  t.equal(credited(balance, 9_999), 7 + 100 + 50, 'before the expiry: every unit')
  t.equal(credited(balance, 10_000), 7 + 60 + 50, 'at the expiry, to the millisecond: its rest of 40 is gone')
  t.equal(credited({ ...balance, settled: 0, live: [] }, 0), 0, 'no grant: nothing')
})

t.test("limitsOf: a credit limit with the sub-account's grants, in name order", async (t) => {
  const stored = storedLimits(
    limitsFromBody({ credits: { tokens: { required: true }, calls: { required: true, low_threshold_percent: 30 } } }),
  )
  t.same(stored?.credits, {
    calls: { required: true, low_threshold_percent: 30 },
    tokens: { required: true, low_threshold_percent: 10 },
  })
  const limits = limitsOf(stored, { tokens: { settled: 5, live: [{ units: 10, left: 3, expiresAt: null }] } })
  t.same(limits?.credits, [
    { meter: 'calls', settled: 0, live: [], lowThresholdPercent: 30 },
    { meter: 'tokens', settled: 5, live: [{ units: 10, left: 3, expiresAt: null }], lowThresholdPercent: 10 },
  ])
  t.equal(limitsOf(storedLimits(limitsFromBody({ credits: {} }))), null, 'none set: no limits')
})

t.test('creditsInForce: its own where it sets a meter, else the plan’s', async (t) => {
  const own = { tokens: { required: true as const, low_threshold_percent: 20 } }
  const plan = {
    tokens: { required: true as const, low_threshold_percent: 5 },
    images: { required: true as const, low_threshold_percent: 10 },
  }
  t.same(creditsInForce(own, plan), {
    images: { required: true, low_threshold_percent: 10 },
    tokens: { required: true, low_threshold_percent: 20 },
  })
  t.same(creditsInForce(undefined, plan), plan.images && creditsInForce(plan, undefined))
  t.equal(creditsInForce(undefined, undefined), null)
})
