// A Redis that forgets refuses no one (docs/internals.md, limits), on a redis-server of the
// test's own: a tenant at 20 % of its rate sees no 429 across a FLUSHDB or a restart of Redis
// (empty), nor at a fresh start against an empty Redis; the overshoot across the loss is counted
// against the bound docs/internals.md gives (one lease per replica, and degraded mode's own).
import t from 'tap'
import type { LimitSubject } from '../../src/limits/types.js'
import { agedRedis, DegradedSpells, offer, replicas, worstWindow } from '../helpers/limits.js'
import { startRedis } from '../helpers/own-redis.js'
import { redisClient } from '../helpers/redis.js'

const server = await startRedis(t)
const prefix = 'forgets:'

const subject = (tenantId: string, limits: Partial<LimitSubject['limits']>): LimitSubject => ({
  tenantId,
  level: 'account',
  limits: { rate: null, monthlyQuota: null, ...limits },
})

const rate = { requests: 100, perSeconds: 1 }

for (const loss of ['FLUSHDB', 'restart'] as const) {
  t.test(`${loss} under steady traffic at 20 % of the rate: no 429`, async (t) => {
    const admin = redisClient(t, { url: server.url })
    await agedRedis(admin, prefix)
    const subjects = [subject(`steady-${loss}`, { rate })]
    const limiters = replicas(t, 2, { url: server.url, prefix })
    await Promise.all(limiters.map((limiter) => limiter.warm(subjects)))
    // 20 req/s for 1 s, the loss, then 20 req/s for 4 s: every one passes.
    const before = await offer(20, 1_000, (i) => limiters[i % 2]!, subjects)
    if (loss === 'FLUSHDB') await admin.flushdb()
    else {
      await server.kill()
      await server.start()
    }
    const after = await offer(20, 4_000, (i) => limiters[i % 2]!, subjects)
    t.comment(
      `${loss}: before ${before.admitted.length}/${before.offered}, after ${after.admitted.length}/${after.offered}`,
    )
    t.equal(before.admitted.length, before.offered, 'all passed before')
    t.equal(after.admitted.length, after.offered, `no 429 across the ${loss}`)
  })

  t.test(
    `${loss} under traffic at twice the rate: overshoot within one lease per replica and degraded mode's own`,
    async (t) => {
      const admin = redisClient(t, { url: server.url })
      await agedRedis(admin, prefix)
      const subjects = [subject(`over-${loss}`, { rate })]
      const spells = new DegradedSpells()
      const limiters = replicas(t, 2, { url: server.url, prefix, spells })
      await Promise.all(limiters.map((limiter) => limiter.warm(subjects)))
      await offer(2 * rate.requests, 1_000, (i) => limiters[i % 2]!, subjects)
      const lost = offer(2 * rate.requests, 3_000, (i) => limiters[i % 2]!, subjects)
      if (loss === 'FLUSHDB') await admin.flushdb()
      else {
        await server.kill()
        await server.start()
      }
      const { admitted, admittedFrom } = await lost
      const worst = worstWindow(admitted, rate, admittedFrom)
      // One lease per replica: a rate's lease is at most ceil(N/10) (rate-limit.ts, cap).
      const leases = limiters.length * Math.ceil(rate.requests / 10)
      // A restart also takes Redis away for a moment: each replica is on its own meanwhile, and the
      // rebuilt bucket is charged for what it admitted then (scripts.ts, epoch). What the charge
      // cannot undo is degraded mode's own allowance (docs/internals.md, limits): over an outage
      // of t, k replicas from a drained bucket pass up to k·N·t/W where a window allows N + N·t/W.
      // That adds nothing to the leases for an outage up to W/(k−1) (1 s here); a slowed machine's
      // restart takes longer.
      const outage = spells.longestMs() / 1_000
      const perSecond = rate.requests / rate.perSeconds
      const bound = leases + Math.max(0, (limiters.length - 1) * perSecond * outage - rate.requests)
      t.comment(
        `${loss}: worst window ${worst.count} in ${worst.seconds.toFixed(3)} s, excess ${worst.excess.toFixed(1)} ` +
          `(bound ${bound.toFixed(1)}: ${leases} of leases, degraded at most ${outage.toFixed(3)} s)`,
      )
      t.ok(worst.excess <= bound, `overshoot ${worst.excess.toFixed(1)} ≤ ${bound.toFixed(1)}`)
    },
  )
}

t.test('FLUSHDB after the first N were spent: the rebuilt bucket starts as replicas saw it, not full', async (t) => {
  const admin = redisClient(t, { url: server.url })
  await agedRedis(admin, prefix)
  const subjects = [subject('drained-FLUSHDB', { rate })]
  const limiters = replicas(t, 2, { url: server.url, prefix })
  await Promise.all(limiters.map((limiter) => limiter.warm(subjects)))
  // From a full bucket, measured from the start: the first N are this window's slack, spent
  // before the loss, so a bucket rebuilt full would pass them again.
  const load = offer(2 * rate.requests, 3_000, (i) => limiters[i % 2]!, subjects)
  await new Promise((done) => setTimeout(done, 1_500))
  await admin.flushdb()
  const { admitted, admittedFrom } = await load
  const worst = worstWindow(admitted, rate, admittedFrom)
  const bound = limiters.length * Math.ceil(rate.requests / 10)
  t.comment(
    `worst window ${worst.count} in ${worst.seconds.toFixed(3)} s, excess ${worst.excess.toFixed(1)} (bound ${bound})`,
  )
  t.ok(worst.excess <= bound, `overshoot ${worst.excess.toFixed(1)} ≤ ${bound}`)
})

t.test('a fresh start against an empty Redis grants at once', async (t) => {
  const subjects = [subject('fresh', { rate: { requests: 10, perSeconds: 1 } })]
  const [limiter] = replicas(t, 1, { url: server.url, prefix: 'fresh-start:' })
  await limiter!.warm(subjects)
  const first = limiter!.admit(subjects)
  t.same([first.allowed, first.violated], [true, []], 'the first request passes')
})
