// The limiter (src/limits/) when Redis loses its keys or goes away, on a redis-server of the
// test's own: a quota rebuilt from the month's use with no extra request, each replica on its own
// while Redis is down, and back to shared leases after (docs/internals.md, limits); a quota's
// month counted once across a Redis that stops answering for a while, or restarts empty.
//
// Postgres is not part of the limiter: `loadMonthUse` is a plain function here that returns what
// the test admitted, which is what the gateway's usage table holds once its counts are flushed.
import t, { type Test } from 'tap'
import { limitKeys } from '../../src/limits/keys.js'
import type { LimitSubject } from '../../src/limits/types.js'
import { agedRedis, DegradedSpells, offer, preciseNow, replicas, worstWindow } from '../helpers/limits.js'
import { startRedis } from '../helpers/own-redis.js'
import { eventually, sleep } from '../helpers/poll.js'
import { redisClient } from '../helpers/redis.js'

const server = await startRedis(t)
const admin = redisClient(t, { url: server.url })
const prefix = 'loss:'

const subject = (tenantId: string, limits: Partial<LimitSubject['limits']>): LimitSubject => ({
  tenantId,
  level: 'account',
  limits: { rate: null, monthlyQuota: null, ...limits },
})

t.test('FLUSHDB near the end of a quota: rebuilt from the month, no extra request passes', async (t) => {
  await agedRedis(admin, prefix)
  const quota = 1_000
  const subjects = [subject('flushed', { monthlyQuota: { requests: quota } })]
  let admitted = 0
  let reads = 0
  const limiters = replicas(t, 2, {
    url: server.url,
    prefix,
    loadMonthUse: async () => {
      reads++
      return admitted
    },
  })
  await Promise.all(limiters.map((limiter) => limiter.warm(subjects)))
  let flushedAt = -1
  let flushTime = Number.POSITIVE_INFINITY
  let lastPass = Date.now()
  // Until well after the flush, and nothing passes any more.
  for (let i = 0; Date.now() - flushTime < 4_000 || Date.now() - lastPass < 500; i++) {
    if (limiters[Math.random() < 0.5 ? 0 : 1]!.admit(subjects).allowed) {
      admitted++
      lastPass = Date.now()
    }
    if (flushedAt < 0 && admitted >= quota - 25) {
      flushedAt = admitted
      flushTime = Date.now()
      await admin.flushdb()
    }
    if (i % 4 === 0) await sleep(1)
  }
  t.comment(`flushed after ${flushedAt}; ${admitted} passed in all; the month read ${reads} times`)
  t.ok(reads >= 2, 'the month was read again after the flush')
  // Across the loss at most one quota lease (ceil(M/100), quota-limit.ts) per replica over.
  const bound = quota + 2 * Math.ceil(quota / 100)
  t.ok(admitted <= bound, `at most a lease per replica over (${admitted} of ${quota}, bound ${bound})`)
  // A unit spent between a lease call and the month's read counts twice: a few may be lost.
  t.ok(admitted >= quota - (2 * quota) / 100, 'at most a lease per replica short')
})

t.test('Redis down: degraded, every limit held by each replica on its own; then back', async (t) => {
  await agedRedis(admin, prefix)
  const rate = { requests: 50, perSeconds: 1 }
  const subjects = [subject('outage', { rate, monthlyQuota: { requests: 100_000 } })]
  // How they decide, not how fast Redis answers: a loaded machine can hold a lease call past the
  // 250 ms of production, and a replica whose call timed out is on its own again (degraded), each
  // at the whole rate. A killed server still fails every call at once (no offline queue).
  const spells = new DegradedSpells()
  const limiters = replicas(t, 2, { url: server.url, prefix, timings: { callTimeoutMs: 2_000 }, spells })
  await Promise.all(limiters.map((limiter) => limiter.warm(subjects)))
  const before = await offer(4 * rate.requests, 1_000, (i) => limiters[i % 2]!, subjects)
  t.notOk(limiters[0]!.degraded, 'shared before')

  await server.kill()
  const perReplica: number[][] = [[], []]
  const start = preciseNow()
  for (let i = 0; preciseNow() - start < 2_000; i++) {
    const which = i % 2
    if (limiters[which]!.admit(subjects).allowed) perReplica[which]!.push(preciseNow())
    await sleep(2)
  }
  t.ok(
    limiters.every((limiter) => limiter.degraded),
    'both replicas degraded',
  )
  for (const [i, passed] of perReplica.entries()) {
    const worst = worstWindow(passed, rate)
    t.comment(
      `replica ${i} on its own: ${passed.length} passed in 2 s, worst window ${worst.count} in ${worst.seconds.toFixed(3)} s`,
    )
    t.ok(worst.excess <= rate.requests / 1000, `replica ${i} keeps the rate on its own`)
    t.ok(passed.length >= 0.9 * rate.requests * 2, `replica ${i} still admits (${passed.length})`)
  }

  await server.start()
  const back = await eventually(6_000, async () => {
    for (const limiter of limiters) limiter.admit(subjects)
    return limiters.every((limiter) => !limiter.degraded)
  })
  t.not(back, null, `shared again ${back} ms after Redis came back`)
  const spellsBefore = spells.count
  const after = await offer(4 * rate.requests, 1_500, (i) => limiters[i % 2]!, subjects)
  t.equal(spells.count, spellsBefore, 'every lease call answered once back: no replica on its own')
  const worst = worstWindow(after.admitted, rate, after.admittedFrom)
  t.comment(
    `before ${before.admitted.length} of ${before.offered}; after ${after.admitted.length} of ${after.offered}, worst window ${worst.count} in ${worst.seconds.toFixed(3)} s`,
  )
  t.ok(worst.excess <= rate.requests / 1000, 'one shared rate again')
  t.ok(after.admitted.length >= 0.95 * rate.requests * 1.5, 'and it admits what the rate allows')
})

/**
 * A quota of 1,000 on two replicas, as the attack on it ran: 300 requests, then 500 over 4 s while
 * `fault` keeps Redis from answering (each replica on its own, probing Redis once a second), then
 * Redis back (`mend`), then 300 more. Redis's count of the month, once both replicas are back on
 * their leases, is what passed plus the leases they hold, and the 200 left of the month pass.
 */
async function quotaAcross(
  t: Test,
  tenant: string,
  fault: () => Promise<void> | void,
  mend: () => Promise<void> | void,
): Promise<void> {
  await agedRedis(admin, prefix)
  const quota = 1_000
  const subjects = [subject(tenant, { monthlyQuota: { requests: quota } })]
  const key = limitKeys.quota(prefix, `account:${tenant}`, new Date().toISOString().slice(0, 7))
  // What passed: the usage table's count, once the meters wrote it (Postgres for a rebuilt month).
  let served = 0
  // Production's timings: a call unanswered after 250 ms is a failure, and Redis may run it later.
  const limiters = replicas(t, 2, { url: server.url, prefix, loadMonthUse: async () => served })
  await Promise.all(limiters.map((limiter) => limiter.warm(subjects)))
  /** Offers `count` requests evenly over `ms`, alternating replicas; returns how many passed. */
  const serve = async (count: number, ms: number): Promise<number> => {
    const start = Date.now()
    let passed = 0
    for (let i = 0; i < count; i++) {
      const due = start + (i * ms) / count
      if (Date.now() < due) await sleep(due - Date.now())
      if (limiters[i % 2]!.admit(subjects).allowed) passed++
    }
    served += passed
    return passed
  }
  const first = await serve(300, 1_000)
  t.ok(first >= 270, `the first 300 pass, but for a dry lease's moment (${first})`)
  await fault()
  // A few are refused while the first call goes unanswered (a dry lease, and no answer yet to say
  // Redis is gone): the gateway's requests would wait for it, then be told to retry.
  const alone = await serve(500, 4_000)
  t.ok(
    limiters.every((limiter) => limiter.degraded),
    'both replicas on their own meanwhile',
  )
  t.ok(alone >= 400, `each replica admits on its own, under the month (${alone} of 500)`)
  await mend()
  const back = await eventually(10_000, async () => limiters.every((limiter) => !limiter.degraded))
  t.not(back, null, `both on their leases again ${back} ms after Redis answered`)
  const used = async () => Number(await admin.hget(key, 'used'))
  // What each replica admitted on its own goes with its call after the one that found Redis back.
  const counted = await eventually(5_000, async () => (await used()) >= served)
  t.not(counted, null, `every unit that passed is counted (${await used()} ≥ ${served})`)
  // Each replica holds at most a lease (ceil(M/100)), and may have left one unspent when it went
  // on its own (counted when granted): at most two a replica above what passed.
  const slack = 2 * limiters.length * Math.ceil(quota / 100)
  const after = await used()
  t.comment(`${served} passed, Redis counts ${after}`)
  t.ok(after <= served + slack, `and once (${after} ≤ ${served} + ${slack})`)
  const last = await serve(300, 1_000)
  const final = await used()
  t.comment(`then ${last} of 300 passed; ${served} in all, Redis counts ${final}`)
  t.ok(served <= quota, `never over the month (${served} of ${quota})`)
  t.ok(served >= quota - slack, `the rest of the month passes (${served} of ${quota})`)
  t.ok(final <= served + slack, `nothing counted twice later either (${final} ≤ ${served} + ${slack})`)
}

t.test('a quota across a Redis stopped (SIGSTOP) for 4 s: each unit counted once', async (t) => {
  await quotaAcross(
    t,
    'stopped',
    () => server.pause(),
    () => server.resume(),
  )
})

t.test('a quota across CLIENT PAUSE WRITE (as FAILOVER pauses): each unit counted once', async (t) => {
  await quotaAcross(
    t,
    'paused',
    async () => void (await admin.client('PAUSE', '60000', 'WRITE')),
    async () => void (await admin.client('UNPAUSE')),
  )
})
