// Limits enforced by gateway replicas of one deployment (one database, one Redis key prefix) over
// real sockets, with Postgres, Redis and an upstream: a rate shared by three replicas, and a limits
// change made through one replica enforced by another (docs/internals.md, limits).
import t from 'tap'
import { actingHeaders, agents, offerOverSockets, recordAdmissions, subAccountVia } from '../helpers/gateway-load.js'
import { metricValue, startReplicas } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { agedRedis, preciseNow, UNHURRIED_LIMITS, worstWindow } from '../helpers/limits.js'
import { sleep } from '../helpers/poll.js'
import { redisClient, redisPrefix, requireRedis } from '../helpers/redis.js'
import { startUpstream } from '../helpers/upstream.js'

await requireRedis()
// When each request reached the upstream: what passed, as seen a socket after the gateway.
const arrivals: number[] = []
const upstream = await startUpstream(t, (_request, response, received) => {
  if (received.url.startsWith('/v1/things/shared')) arrivals.push(preciseNow())
  response.writeHead(200, { 'content-type': 'text/plain' })
  response.end('ok')
})
const prefix = redisPrefix(t)
await agedRedis(redisClient(t), prefix)
// This file measures how the replicas share a rate, not how fast Redis answers: the three replicas
// and the load share one event loop, which a busy machine can stall.
const replicas = await startReplicas(t, 3, {
  redisKeyPrefix: prefix,
  ...UNHURRIED_LIMITS,
  gatewayConfig: { routes: [{ prefix: '/v1/things', upstream: upstream.url }] },
})
const first = replicas[0]!
const urls = replicas.map((g) => g.url)
const scopes = ['sub_accounts:read', 'sub_accounts:write', 'things:read']

t.test('a rate offered twice over, round robin over 3 replicas: never over, at least 95 % once warm', async (t) => {
  const rate = { requests: 50, perSeconds: 1 }
  const parent = await first.createParent({ scopes })
  const sub = await subAccountVia(first.url, parent.apiKey, 'shared', {
    rate: { requests: rate.requests, per_seconds: rate.perSeconds },
  })
  const admitted = replicas.map((g) => recordAdmissions(g.app, 'sub_account.rate'))
  const ms = 5_000
  const run = await offerOverSockets({
    urls,
    agents: agents(t, 3),
    perSecond: 2 * rate.requests,
    ms,
    pick: (i) => i % 3,
    path: '/v1/things/shared',
    headers: actingHeaders(parent.apiKey, sub),
  })
  const passed = run.answers.filter((a) => a.status === 200)
  const refused = run.answers.filter((a) => a.status !== 200)
  t.same(
    [...new Set(refused.map((a) => `${a.status} ${a.code}`))],
    refused.length === 0 ? [] : ['429 rate_limited'],
    'every refusal is a 429 rate_limited',
  )
  t.equal(arrivals.length, passed.length, 'the upstream got every request answered 200, and no other')

  // At the gateways (the instants their limiters admitted at): the bound, with 1 ms of slack for
  // the instant being read just after the admission.
  const atGateways = admitted.flat().sort((a, b) => a - b)
  t.equal(atGateways.length, passed.length, 'each 200 was admitted by a limiter')
  const worst = worstWindow(atGateways, rate)
  t.ok(
    worst.excess <= rate.requests / 1000,
    `at the gateways: worst window ${worst.count} in ${worst.seconds.toFixed(3)} s`,
  )
  // At the upstream, each instant is late by a socket's delay, which varies: by no more than the
  // slowest 200's round trip (it reached the upstream after its admission and before its answer).
  // Two requests (40 ms) of slack, or what that round trip lets bunch up, on a machine that slow.
  const slowestTrip = Math.max(...passed.map((a) => a.answeredAt - a.sentAt))
  const upstreamSlack = Math.max(2, (rate.requests * slowestTrip) / 1000 / rate.perSeconds)
  const upstreamWorst = worstWindow(arrivals, rate)
  t.ok(
    upstreamWorst.excess <= upstreamSlack,
    `at the upstream: worst window ${upstreamWorst.count} in ${upstreamWorst.seconds.toFixed(3)} s ` +
      `(excess ${upstreamWorst.excess.toFixed(2)}, slack ${upstreamSlack.toFixed(2)} for a round trip of ${slowestTrip.toFixed(0)} ms)`,
  )

  const warmFrom = run.start + 1_000
  const warm = atGateways.filter((at) => at >= warmFrom && at < run.start + ms).length
  const allowed = (rate.requests * (ms - 1_000)) / 1_000 / rate.perSeconds
  const perReplica = admitted.map((list) => list.length).join('/')
  t.comment(
    `offered ${run.answers.length} over ${ms} ms, admitted ${passed.length} (per replica ${perReplica}); ` +
      `after the first second ${warm} of ${allowed} (${((100 * warm) / allowed).toFixed(1)} %); ` +
      `worst window at the gateways ${worst.count} in ${worst.seconds.toFixed(3)} s ` +
      `(bound ${(rate.requests + (rate.requests * worst.seconds) / rate.perSeconds).toFixed(1)}), ` +
      `at the upstream ${upstreamWorst.count} in ${upstreamWorst.seconds.toFixed(3)} s ` +
      `(excess ${upstreamWorst.excess.toFixed(2)})`,
  )
  t.ok(warm >= 0.95 * allowed, `${warm} of ${allowed} admitted once warm`)
  const calls = await Promise.all(replicas.map((g) => metricValue(g.app, 'tgw_limit_lease_calls_total')))
  const failures = await Promise.all(replicas.map((g) => metricValue(g.app, 'tgw_limit_lease_failures_total')))
  t.comment(`lease calls per replica ${calls.join('/')}, failed ${failures.join('/')}`)
  t.same(failures, [0, 0, 0], 'Redis answered every lease call in time: the replicas shared the rate throughout')
})

/**
 * Sends a request for `acting` to `url` every `everyMs` from now until `ms` after `changedAt()`
 * is known, and returns what each answered with, and when.
 */
async function keepSending(url: string, apiKey: string, acting: string, path: string, until: () => number | null) {
  const answers: { at: number; status: number }[] = []
  for (;;) {
    const deadline = until()
    if (deadline !== null && preciseNow() > deadline) return answers
    const res = await callAs(url, apiKey, { path, acting })
    answers.push({ at: preciseNow(), status: res.status })
    await sleep(10)
  }
}

for (const [before, what] of [
  [undefined, 'none'],
  [{ rate: { requests: 1_000, per_seconds: 1 } }, 'a generous rate, leased by the busy replica'],
] as const) {
  t.test(`a rate set through one replica is enforced by another within 1 s (before: ${what})`, async (t) => {
    const [a, b] = [replicas[0]!, replicas[1]!]
    const parent = await a.createParent({ scopes })
    const sub = await subAccountVia(a.url, parent.apiKey, `changed-${what}`, before)
    // B knows the sub-account (cached, remembered among its recent admissions) and keeps sending.
    let changedAt: number | null = null
    const path = `/v1/things/change-${what.length}`
    const sending = keepSending(b.url, parent.apiKey, sub, path, () => (changedAt === null ? null : changedAt + 1_500))
    await sleep(500)
    const patched = await callAs(a.url, parent.apiKey, {
      method: 'PATCH',
      path: `/v1/sub-accounts/${sub}`,
      acting: 'self',
      json: { limits: { rate: { requests: 1, per_seconds: 60 }, monthly_quota: null } },
    })
    t.equal(patched.status, 200, `PATCH through A: ${patched.body.slice(0, 200)}`)
    changedAt = preciseNow()
    const answers = await sending
    const earlier = answers.filter((x) => x.at < changedAt!)
    const after = answers.filter((x) => x.at >= changedAt!)
    t.ok(
      earlier.every((x) => x.status === 200),
      `B passed all ${earlier.length} before the change`,
    )
    const firstRefusal = after.find((x) => x.status === 429)
    const refusedAfterMs = firstRefusal === undefined ? null : firstRefusal.at - changedAt
    const passedAfter = after.filter((x) => x.status === 200).length
    const lastPass = after.filter((x) => x.status === 200).at(-1)
    t.comment(
      `before ${what}: B refused ${refusedAfterMs?.toFixed(0)} ms after the PATCH answered; ` +
        `${passedAfter} of ${after.length} passed after it`,
    )
    t.ok(refusedAfterMs !== null && refusedAfterMs <= 1_000, 'B refuses within 1 s')
    // One under the new rate, and at most one admitted by B under the old limits while the
    // invalidation was on its way (answered after the PATCH was).
    t.ok(passedAfter <= 2, `at most 2 pass B after the PATCH answered (${passedAfter})`)
    t.ok(
      lastPass === undefined || firstRefusal === undefined || lastPass.at < firstRefusal.at,
      'nothing passes B once it refused (1 per 60 s)',
    )
    t.ok(
      after.every((x) => x.status === 200 || x.status === 429),
      'only 200s and 429s',
    )
  })
}
