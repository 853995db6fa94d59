// How exactly a rate limit holds across replicas (docs/internals.md, limits): gateway processes
// sharing Postgres and Redis, one sub-account with a rate of N per W seconds, an open-loop load of
// a multiple of the rate spread over the replicas in turn. What passes is counted from the client's
// side. bench/README.md says what it prints and its knobs.
import http from 'node:http'
import { performance } from 'node:perf_hooks'
import {
  checkInterrupted,
  counts,
  createDatabase,
  deleteRedisPrefix,
  envInt,
  fmt,
  type Gateway,
  isInterrupted,
  median,
  metric,
  PROXIED_PATH,
  reportHead,
  request,
  run,
  type Server,
  scrape,
  seedActing,
  sleep,
  startGateway,
  startUpstream,
  stopChild,
  table,
} from './lib.js'
import { type OwnRedis, startOwnRedis } from './redis-server.js'

const N = envInt('BENCH_RATE', 100)
const W = envInt('BENCH_WINDOW', 1)
const SECONDS = envInt('BENCH_DURATION', 60)
const REPLICAS = envInt('BENCH_REPLICAS', 3)
const LOADS = (process.env.BENCH_LOADS || '2,10').split(',').map(Number)
/** Losses of Redis's keys under 2× the rate, on a redis-server of the bench's own: flushdb, restart. */
const LOSSES = (process.env.BENCH_LOSSES ?? 'flushdb,restart').split(',').filter((loss) => loss !== '')
const LOSS_SECONDS = envInt('BENCH_LOSS_DURATION', 8)
/** The loss comes this long into its load: the bucket's first N spent, every replica leased. */
const LOSS_AT_MS = 3_000
/** Past this, the bucket's first N are spent at 2× and above and every replica has its lease. */
const WARM_MS = 2_000

/** One request: sent and answered at ms since the phase began. */
interface Sample {
  sent: number
  answered: number
  status: number
}

/** An open loop: request k leaves at k / rate, to replica k mod replicas, whatever came back. */
async function offer(
  gateways: Gateway[],
  headers: Record<string, string>,
  perSecond: number,
  seconds = SECONDS,
): Promise<Sample[]> {
  const agents = gateways.map(() => new http.Agent({ keepAlive: true, maxSockets: 64 }))
  const bases = gateways.map((g) => new URL(g.url))
  const samples: Sample[] = []
  const pending: Promise<void>[] = []
  const total = Math.round(perSecond * seconds)
  const start = performance.now()
  for (let k = 0; k < total && !isInterrupted(); ) {
    const due = Math.min(total, Math.floor(((performance.now() - start) * perSecond) / 1000) + 1)
    for (; k < due; k++) {
      const i = k % gateways.length
      const sent = performance.now() - start
      pending.push(
        request(agents[i]!, bases[i]!, { method: 'GET', path: PROXIED_PATH, headers }).then(
          (answer) => void samples.push({ sent, answered: performance.now() - start, status: answer.status }),
          () => void samples.push({ sent, answered: performance.now() - start, status: 0 }),
        ),
      )
    }
    await sleep(1)
  }
  await Promise.all(pending)
  for (const agent of agents) agent.destroy()
  checkInterrupted()
  return samples
}

/**
 * The most admitted beyond N + N·t/W over any window [a, b]: admissions counted only when sent at
 * or after a and answered by b, so a positive result is certainly an overshoot (the gateway
 * admitted each somewhere between its sending and its answer).
 */
function worstWindow(admitted: Sample[]): { excess: number; seconds: number } {
  const bySent = [...admitted].sort((x, y) => x.sent - y.sent)
  const answered: number[] = []
  let worst = { excess: Number.NEGATIVE_INFINITY, seconds: 0 }
  for (let i = bySent.length - 1; i >= 0; i--) {
    const a = bySent[i]!.sent
    const r = bySent[i]!.answered
    let lo = 0
    let hi = answered.length
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      if (answered[mid]! < r) lo = mid + 1
      else hi = mid
    }
    answered.splice(lo, 0, r)
    // Windows from a to each answer after it: m + 1 admissions within.
    for (let m = 0; m < answered.length; m++) {
      const excess = m + 1 - N - (N * (answered[m]! - a)) / (W * 1000)
      if (excess > worst.excess) worst = { excess, seconds: (answered[m]! - a) / 1000 }
    }
  }
  return worst
}

interface Phase {
  factor: number
  offered: number
  statuses: Record<string, number>
  admitted: number
  allowed: number
  worst: { excess: number; seconds: number }
  warmRatio: number
  perSecond: number[]
  replicas: {
    admitted: number
    refused: number
    leaseCalls: number
    leaseFailures: number
    coldWaits: number
    /**
     * Of them, requests that waited once warm: after WARM_MS (the target is none: docs/internals.md,
     * "A dry lease").
     */
    warmWaits: number
  }[]
}

async function phase(gateways: Gateway[], databaseUrl: string, factor: number): Promise<Phase> {
  // A tenant of its own: a full bucket and no lease on any replica at the start.
  const rate = { requests: N, per_seconds: W }
  const { headers } = await seedActing(gateways[0]!, databaseUrl, { subAccount: { rate } })
  const offered = (factor * N) / W
  console.error(
    `offering ${fmt(offered)} req/s (${factor}× the rate) for ${SECONDS} s over ${gateways.length} replicas…`,
  )
  const before = await Promise.all(gateways.map((g) => scrape(g.metricsPort)))
  const load = offer(gateways, headers, offered)
  await sleep(WARM_MS)
  const warmed = await Promise.all(gateways.map((g) => scrape(g.metricsPort)))
  const samples = await load
  const after = await Promise.all(gateways.map((g) => scrape(g.metricsPort)))
  const statuses: Record<string, number> = {}
  for (const s of samples) statuses[s.status] = (statuses[s.status] ?? 0) + 1
  const admitted = samples.filter((s) => s.status === 200)
  const span = Math.max(...samples.map((s) => s.answered)) - Math.min(...samples.map((s) => s.sent))
  // Once warm: the requests sent after WARM_MS against the refill over that time, N/W a second.
  const endMs = SECONDS * 1000
  const warm = admitted.filter((s) => s.sent >= WARM_MS).length
  const perSecond = Array.from({ length: SECONDS }, () => 0)
  for (const s of admitted) if (s.sent < endMs) perSecond[Math.floor(s.sent / 1000)]!++
  const delta = (i: number, name: string, ...labels: string[]) =>
    metric(after[i], name, ...labels) - metric(before[i], name, ...labels)
  return {
    factor,
    offered,
    statuses,
    admitted: admitted.length,
    allowed: N + (N * span) / (W * 1000),
    worst: worstWindow(admitted),
    warmRatio: warm / ((N * (endMs - WARM_MS)) / (W * 1000)),
    perSecond,
    replicas: gateways.map((_, i) => ({
      admitted: delta(i, 'tgw_limit_decisions_total', 'policy="sub_account.rate"', 'outcome="admitted"'),
      refused: delta(i, 'tgw_limit_decisions_total', 'policy="sub_account.rate"', 'outcome="refused"'),
      leaseCalls: delta(i, 'tgw_limit_lease_calls_total'),
      leaseFailures: delta(i, 'tgw_limit_lease_failures_total'),
      coldWaits: delta(i, 'tgw_limit_cold_waits_total'),
      warmWaits: metric(after[i], 'tgw_limit_cold_waits_total') - metric(warmed[i], 'tgw_limit_cold_waits_total'),
    })),
  }
}

interface LossPhase {
  loss: string
  statuses: Record<string, number>
  admitted: number
  allowed: number
  worst: { excess: number; seconds: number }
  leaseFailures: number
}

/** 2× the rate for LOSS_SECONDS over the replicas, and Redis's keys lost LOSS_AT_MS into it. */
async function lossPhase(gateways: Gateway[], databaseUrl: string, redis: OwnRedis, loss: string): Promise<LossPhase> {
  const rate = { requests: N, per_seconds: W }
  const { headers } = await seedActing(gateways[0]!, databaseUrl, { subAccount: { rate } })
  console.error(`offering 2× the rate for ${LOSS_SECONDS} s, ${loss} after ${LOSS_AT_MS / 1000} s…`)
  const before = await Promise.all(gateways.map((g) => scrape(g.metricsPort)))
  const load = offer(gateways, headers, (2 * N) / W, LOSS_SECONDS)
  await sleep(LOSS_AT_MS)
  if (loss === 'flushdb') await redis.flushdb()
  else if (loss === 'restart') await redis.restart()
  else throw new Error(`BENCH_LOSSES: unknown loss ${loss} (flushdb, restart)`)
  const samples = await load
  const after = await Promise.all(gateways.map((g) => scrape(g.metricsPort)))
  const statuses: Record<string, number> = {}
  for (const s of samples) statuses[s.status] = (statuses[s.status] ?? 0) + 1
  const admitted = samples.filter((s) => s.status === 200)
  const span = Math.max(...samples.map((s) => s.answered)) - Math.min(...samples.map((s) => s.sent))
  return {
    loss,
    statuses,
    admitted: admitted.length,
    allowed: N + (N * span) / (W * 1000),
    worst: worstWindow(admitted),
    leaseFailures: gateways.reduce(
      (sum, _, i) =>
        sum + metric(after[i], 'tgw_limit_lease_failures_total') - metric(before[i], 'tgw_limit_lease_failures_total'),
      0,
    ),
  }
}

async function main(): Promise<void> {
  const db = await createDatabase('limacc')
  const prefix = `tgwlimacc:${db.name}:`
  const started: Server[] = []
  try {
    const upstream = await startUpstream()
    started.push(upstream)
    const gateways: Gateway[] = []
    // One after another: the first migrates the fresh database.
    for (let i = 0; i < REPLICAS; i++) {
      const env = { REDIS_KEY_PREFIX: prefix }
      gateways.push(await startGateway({ databaseUrl: db.url, upstreamUrl: upstream.url, env }))
      started.push(gateways[i]!)
    }
    const phases: Phase[] = []
    for (const factor of LOADS) phases.push(await phase(gateways, db.url, factor))
    const losses: LossPhase[] = []
    if (LOSSES.length > 0) {
      const redis = await startOwnRedis()
      try {
        const onOwn: Gateway[] = []
        for (let i = 0; i < REPLICAS; i++) {
          const env = { REDIS_KEY_PREFIX: prefix, REDIS_URL: redis.url }
          onOwn.push(await startGateway({ databaseUrl: db.url, upstreamUrl: upstream.url, env }))
          started.push(onOwn[i]!)
        }
        for (const loss of LOSSES) losses.push(await lossPhase(onOwn, db.url, redis, loss))
        for (const gateway of onOwn) await stopChild(gateway.child)
      } finally {
        await redis.stop()
      }
    }
    report(phases, losses)
    const log = started.map((s) => s.output().trim()).filter((text) => text !== '')
    if (log.length > 0) console.error(`the servers wrote:\n${log.join('\n')}`)
  } catch (err) {
    if (!isInterrupted()) for (const server of started) console.error(`${server.url} wrote:\n${server.output()}`)
    throw err
  } finally {
    for (const server of started.reverse()) await stopChild(server.child).catch((err) => console.error(err))
    await db.drop()
    await deleteRedisPrefix(prefix)
  }
}

function report(phases: Phase[], losses: LossPhase[]): void {
  const bound = REPLICAS * Math.max(1, Math.ceil(N / 10))
  const warmSeconds = (p: Phase) => p.perSecond.slice(WARM_MS / 1000)
  const lines = [
    ...reportHead('bench:limits-accuracy'),
    `limit     a sub-account's rate of ${N} per ${W} s (over any t s at most N + N·t/W pass), a tenant of its own per load`,
    `load      GET ${PROXIED_PATH}, open loop, request k to replica k mod ${REPLICAS}; ${SECONDS} s per load; each replica a gateway process, one database and one Redis prefix`,
    '',
    ...table(
      [
        'offered',
        'statuses',
        'admitted',
        'allowed',
        'admitted/allowed',
        'worst window',
        'warm/refill',
        'per s once warm',
      ],
      phases.map((p) => [
        `${p.factor}× (${fmt(p.offered)}/s)`,
        counts(p.statuses),
        fmt(p.admitted),
        fmt(p.allowed),
        (p.admitted / p.allowed).toFixed(4),
        `${p.worst.excess.toFixed(1)} over ${p.worst.seconds.toFixed(2)} s`,
        p.warmRatio.toFixed(4),
        `${Math.min(...warmSeconds(p))}–${Math.max(...warmSeconds(p))}, median ${median(warmSeconds(p))}`,
      ]),
    ),
    '(allowed: N + N·t/W over the phase, first sending to last answer; worst window: the most admitted beyond N + N·t/W',
    ' over any window, counting requests sent and answered within it, target ≤ 0; warm/refill: admitted among the requests',
    ` sent after ${WARM_MS / 1000} s over N/W a second, 1 − it is the under-admission; per s: admitted by the second they were sent in)`,
    '',
    ...table(
      ['offered', 'replica', 'admitted', 'refused', 'lease calls', 'failed', 'waited for a lease', 'of them once warm'],
      phases.flatMap((p) =>
        p.replicas.map((r, i) => [
          `${p.factor}×`,
          String(i + 1),
          fmt(r.admitted),
          fmt(r.refused),
          fmt(r.leaseCalls),
          fmt(r.leaseFailures),
          fmt(r.coldWaits),
          fmt(r.warmWaits),
        ]),
      ),
    ),
    `(from each replica’s /metrics: decisions of sub_account.rate, tgw_limit_lease_calls_total and _failures_total (a failure: that replica on its own for a while, as when Redis is down), tgw_limit_cold_waits_total over the load and after its first ${WARM_MS / 1000} s: the target is none once warm)`,
    '',
    ...(losses.length === 0
      ? []
      : [
          `losses    2× the rate for ${LOSS_SECONDS} s on a redis-server of the bench's own, its keys lost ${LOSS_AT_MS / 1000} s in; bound across a loss: one lease per replica, ${REPLICAS} × ⌈N/10⌉ = ${bound}`,
          ...table(
            ['loss', 'statuses', 'admitted', 'allowed', 'worst window', 'within the bound', 'failed lease calls'],
            losses.map((l) => [
              l.loss,
              counts(l.statuses),
              fmt(l.admitted),
              fmt(l.allowed),
              `${l.worst.excess.toFixed(1)} over ${l.worst.seconds.toFixed(2)} s`,
              l.worst.excess <= bound ? 'yes' : 'NO',
              fmt(l.leaseFailures),
            ]),
          ),
        ]),
  ]
  console.log(lines.join('\n'))
}

run(main)
