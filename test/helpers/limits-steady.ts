// A tenant past its limit over three gateway replicas of one deployment, on the tests' Redis or a
// topology of the test's own (helpers/redis-topologies.ts): no waiting
// (docs/api.md#limits-and-quotas), as limits-no-waiting*.test.ts check it.
import type { Agent } from 'node:http'
import type { Test } from 'tap'
import {
  type Answer,
  actingHeaders,
  agents,
  offerOverSockets,
  recordAdmissions,
  subAccountVia,
} from './gateway-load.js'
import { metricValue, startReplicas, type TestGateway } from './gateway.js'
import { REACHED_FOR_MS } from '../../src/limits/lease-terms.js'
import { agedRedis, preciseNow, UNHURRIED_LIMITS, worstWindow } from './limits.js'
import { recordLoopStalls } from './loop-stalls.js'
import { redisClient, redisPrefix } from './redis.js'
import { serverStalls, startTopology, type Topology, type TopologyKind } from './redis-topologies.js'
import type { TestLike } from './test-like.js'

const scopes = ['sub_accounts:read', 'sub_accounts:write', 'things:read']

export interface Deployment {
  replicas: TestGateway[]
  pool: Agent[]
  /** A topology of the test's own; none on the tests' Redis. */
  topology?: Topology
}

/**
 * Three replicas on the tests' Redis (`shared`) or on a topology of the test's own. How they
 * decide, not how fast Redis answers: a busy machine can hold a lease call past the 250 ms it gets
 * in production, and a replica whose call failed is on its own (degraded).
 */
export async function deploy(t: TestLike, kind: 'shared' | TopologyKind, upstreamUrl: string): Promise<Deployment> {
  const options = {
    ...UNHURRIED_LIMITS,
    gatewayConfig: { routes: [{ prefix: '/v1/things', upstream: upstreamUrl }] },
  }
  if (kind === 'shared') {
    const prefix = redisPrefix(t)
    await agedRedis(redisClient(t), prefix)
    return { replicas: await startReplicas(t, 3, { ...options, redisKeyPrefix: prefix }), pool: agents(t, 3) }
  }
  // No failover here: a loaded machine that starves a master for a second must not start one.
  const topology = await startTopology(t, kind, { failoverAfterMs: 10_000 })
  return {
    replicas: await startReplicas(t, 3, { ...options, redis: { env: topology.env } }),
    pool: agents(t, 3),
    topology,
  }
}

export const coldWaits = (d: Deployment) =>
  Promise.all(d.replicas.map((g) => metricValue(g.app, 'tgw_limit_cold_waits_total')))
const failures = (d: Deployment) =>
  Promise.all(d.replicas.map((g) => metricValue(g.app, 'tgw_limit_lease_failures_total')))
const leaseCalls = (d: Deployment) =>
  Promise.all(d.replicas.map((g) => metricValue(g.app, 'tgw_limit_lease_calls_total')))

/** `perSecond` requests a second for `ms`, round robin over the replicas. */
export const offer = (d: Deployment, headers: Record<string, string>, path: string, perSecond: number, ms: number) =>
  offerOverSockets({
    urls: d.replicas.map((g) => g.url),
    agents: d.pool,
    perSecond,
    ms,
    pick: (i) => i % 3,
    path,
    headers,
  })

/**
 * Offers in spells of `ms` until, in a spell after the first (which spends the bucket's N at
 * twice the rate and more), every replica refused a request: its limit found reached there. At
 * most 10 spells: the warm-up, after which the traffic is steady.
 */
export async function untilEveryReplicaRefused(
  d: Deployment,
  headers: Record<string, string>,
  path: string,
  perSecond: number,
  ms: number,
): Promise<Answer[]> {
  const answers: Answer[] = []
  for (let spell = 0; spell < 10; spell++) {
    const { answers: spelled } = await offer(d, headers, path, perSecond, ms)
    answers.push(...spelled)
    const everyRefused = d.replicas.every((_, i) => spelled.some((a) => a.replica === i && a.status === 429))
    if (spell > 0 && everyRefused) return answers
  }
  throw new Error('a replica never refused: the limit was never reached there')
}

export async function tenant(d: Deployment, name: string, limits: unknown) {
  const [first] = d.replicas
  const owner = await first!.createParent({ scopes })
  const sub = await subAccountVia(first!.url, owner.apiKey, name, limits)
  return actingHeaders(owner.apiKey, sub)
}

/** A rate offered twice over: once every replica found it reached, no request waits; never over, ≥ 95 %. */
export async function twiceTheRate(t: Test, d: Deployment, name: string): Promise<void> {
  const rate = { requests: 100, perSeconds: 1 }
  const headers = await tenant(d, name, { rate: { requests: rate.requests, per_seconds: 1 } })
  const path = `/v1/things/${name}`
  const admitted = d.replicas.map((g) => recordAdmissions(g.app, 'sub_account.rate'))
  const perSecond = 2 * rate.requests

  const warmUp = await untilEveryReplicaRefused(d, headers, path, perSecond, 1_000)
  const warm = await coldWaits(d)
  // Stalls of this process's loop, which the replicas share (below).
  const loopStalls = recordLoopStalls(50)
  t.teardown(() => loopStalls.stop())
  // And what the topology's servers could not answer: said when the check fails, never excused.
  const servers = d.topology === undefined ? null : serverStalls(d.topology)
  const callsBefore = await leaseCalls(d)
  const steady = await offer(d, headers, path, perSecond, 4_000)
  const steadyEnd = preciseNow()
  loopStalls.stop()
  servers?.stop()
  const after = await coldWaits(d)
  const calls = (await leaseCalls(d)).map((n, i) => n - callsBefore[i]!)

  const statuses = new Set(steady.answers.map((a) => `${a.status} ${a.code ?? ''}`.trim()))
  t.same([...statuses].sort(), ['200', '429 rate_limited'], 'steady: 200s and 429 rate_limited only')
  t.comment(
    `warm-up ${warmUp.length} requests; cold waits per replica: at warm ${warm.join('/')}, after ${after.join('/')}`,
  )
  // A limit stays known as reached for REACHED_FOR_MS after the answer that said so: a loop that
  // could not run for about that long (a machine running five files beside stress-ng) lets the
  // word lapse, and a request then rightly waits for the next answer. Only then are a few allowed.
  const longestStall = Math.max(0, ...loopStalls.recorded().map(([from, to]) => to - from))
  const waited = after.map((n, i) => n - warm[i]!)
  const refusals = steady.answers.filter((a) => a.status === 429).length
  const serversLost = servers?.lostMs() ?? null
  const seen =
    `${steady.answers.length} requests over 4 s, ${refusals} refused; lease calls ${calls.join('/')}; ` +
    `the longest stall of the loop: ${longestStall} ms` +
    (serversLost === null ? '' : `; Redis servers lost ${serversLost} ms`)
  // So may a Redis server that could not answer for that long: the answers that say so come late.
  const stalled = Math.max(longestStall, serversLost ?? 0)
  if (stalled < REACHED_FOR_MS / 2) t.same(waited, [0, 0, 0], `no request waited for Redis once warm (${seen})`)
  else
    t.ok(
      waited.every((n) => n <= 10),
      `few requests waited for Redis once warm (${waited.join('/')} of ${steady.answers.length}): stalled for ${stalled} ms (${seen})`,
    )

  // Never over, over every window of the whole run (warm-up included), at the gateways.
  const all = admitted.flat().sort((a, b) => a - b)
  const worst = worstWindow(all, rate)
  t.ok(worst.excess <= rate.requests / 1000, `never over: worst window ${worst.count} in ${worst.seconds.toFixed(3)} s`)
  // Little under: what the bucket refilled over the steady spell, admitted.
  const inSteady = all.filter((at) => at >= steady.start && at < steadyEnd).length
  const refill = (rate.requests * (steadyEnd - steady.start)) / 1000 / rate.perSeconds
  t.comment(
    `steady: ${inSteady} admitted of a refill of ${refill.toFixed(1)} (${((100 * inSteady) / refill).toFixed(1)} %)`,
  )
  t.ok(inSteady >= 0.95 * refill, `little under: ${inSteady} ≥ 95 % of ${refill.toFixed(1)}`)
  t.same(await failures(d), [0, 0, 0], 'every lease call answered: the replicas shared the rate throughout')
}
