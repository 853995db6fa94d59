// CPU per proxied request of one gateway process (compiled, the image's Node) acting in turn as
// three sub-accounts of three parents on one route whose upstream reports a meter (`tokens`, 42
// units an answer): `credit`, whose credit of the meter is required and granted 10^12 units (never
// exhausted), and `none` and `none-b`, without limits. Each trio of rounds runs the three at the
// same fixed rate, in one of the six orders in turn; credit/none per trio is what a required
// credit costs a request (docs/api.md, Credits), none-b/none the noise floor of the same run.
// bench/README.md.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import {
  cpuNanos,
  createDatabase,
  envInt,
  fmt,
  type Gateway,
  isInterrupted,
  load,
  type Measured,
  medianOf,
  metric,
  PROXIED_PATH,
  pin,
  pinnedTo,
  pinning,
  ROUND_COLUMNS,
  reportHead,
  roundCells,
  roundLine,
  roundRatios,
  run,
  type Server,
  scrape,
  seedActing,
  seedCredited,
  startGateway,
  startUpstream,
  stopChild,
  table,
} from './lib.js'

const TRIOS = envInt('BENCH_TRIOS', 30)
const DURATION = envInt('BENCH_DURATION', 3)
/** Requests a second, every side alike: below the gateway's maximum, so that each does the same work a second. */
const RATE = envInt('BENCH_RATE', 1_500)
const CONNECTIONS = envInt('BENCH_CONNECTIONS', 16)
const WARMUP = envInt('BENCH_WARMUP', 5)
const WARMUP_ROUNDS = envInt('BENCH_WARMUP_ROUNDS', 2)
/**
 * Seconds of a side's own load, unmeasured, before each of its rounds: what a round starts with
 * (the credit's lease shrunk or forgotten while the others ran, the previous side's leftovers)
 * falls there, and a round measures a steady rate.
 */
const LEAD = envInt('BENCH_LEAD', 1, 0)

/**
 * With BENCH_PROFILE=<dir>, the measured rounds' spans go to <dir>/credit-cpu-spans.json, in µs of
 * the monotonic clock, as V8 stamps a profile's samples: `profile-summary.ts <profile> --spans
 * <file> <side>` then counts that side's samples only, from one process.
 */
const SPANS = process.env.BENCH_PROFILE ? resolve(process.env.BENCH_PROFILE, 'credit-cpu-spans.json') : null
const monotonicMicros = () => Number(process.hrtime.bigint() / 1000n)

const SIDES = ['credit', 'none', 'none-b'] as const
type SideName = (typeof SIDES)[number]
/** Every order of the three sides once: over six trios each side runs first, second and last twice, and each precedes each other three times. */
const ORDERS: SideName[][] = [
  ['credit', 'none', 'none-b'],
  ['none-b', 'none', 'credit'],
  ['none', 'credit', 'none-b'],
  ['none-b', 'credit', 'none'],
  ['none', 'none-b', 'credit'],
  ['credit', 'none-b', 'none'],
]

/** Counters of the gateway's /metrics read around each round: what a side made it do beside proxying. */
const COUNTERS = {
  /** Lease calls to Redis (the credit's, and the leftovers of the round before). */
  leaseCalls: ['tgw_limit_lease_calls_total'],
  /** Requests that waited for a lease (a first one, or a renewal after a burst emptied it). */
  coldWaits: ['tgw_limit_cold_waits_total'],
  redis: ['tgw_store_lookups_total', 'tier="redis"'],
  postgres: ['tgw_store_lookups_total', 'tier="postgres"'],
} as const

interface Side {
  name: SideName
  headers: Record<string, string>
  subId: string
  parentId: string
  /** What the gateway's counters moved by over this side's measured rounds (COUNTERS). */
  moved: Record<keyof typeof COUNTERS, number>
  rounds: Measured[]
}

run(async () => {
  const db = await createDatabase('credit_cpu')
  const configDir = mkdtempSync(join(tmpdir(), 'tgw-bench-credit-cpu-'))
  const started: Server[] = []
  // The gateway on a CPU of its own; the load (this process) and the upstream on the others.
  const pins = pinning()
  if (pins !== null) pin([process.pid], pins.rest)
  try {
    const upstream = await startUpstream({ meter: true, wrap: pinnedTo(pins?.rest) })
    started.push(upstream)
    const config = join(configDir, 'gateway.yaml')
    writeFileSync(
      config,
      `routes:\n  - prefix: /v1/things\n    upstream: ${upstream.url}\n    meters: [{ name: tokens, header: X-Tokens-Used }]\n`,
    )
    const gateway = await startGateway({
      databaseUrl: db.url,
      upstreamUrl: upstream.url,
      env: { GATEWAY_CONFIG: config },
      wrap: pinnedTo(pins?.server),
    })
    started.push(gateway)
    const seeded = {
      credit: await seedCredited(gateway, db.url),
      none: await seedActing(gateway, db.url),
      'none-b': await seedActing(gateway, db.url),
    }
    const sides: Side[] = SIDES.map((name) => ({
      name,
      ...seeded[name],
      moved: { leaseCalls: 0, coldWaits: 0, redis: 0, postgres: 0 },
      rounds: [],
    }))

    // Pre-flight: each side reaches the upstream as its own sub-account, its meter read off the answer.
    for (const side of sides) {
      const response = await fetch(`${gateway.url}/v1/things/echo`, { headers: side.headers })
      const seen = (await response.json()) as Record<string, string>
      if (response.status !== 200 || seen['x-service-resolved-tenant'] !== side.subId)
        throw new Error(`${side.name}: ${response.status}, the upstream saw ${JSON.stringify(seen).slice(0, 300)}`)
      if (response.headers.get('x-tokens-used') !== null) throw new Error(`${side.name}: X-Tokens-Used passed on`)
    }

    const spans: { side: SideName; from: number; to: number }[] = []
    /** A round of `side`; `counted`: its counters and span kept (a measured round, not a warm-up). */
    const measure = async (side: Side, seconds: number, label: string, counted: boolean): Promise<Measured> => {
      // Idle through the other sides' rounds, the credit's limit may have been forgotten: one
      // request takes its first lease again, then the lead-in brings it to the rate.
      await fetch(`${gateway.url}${PROXIED_PATH}`, { headers: side.headers }).then((r) => r.text())
      if (LEAD > 0)
        await load({ url: gateway.url, headers: side.headers, connections: CONNECTIONS, seconds: LEAD, rate: RATE })
      const before = counted ? await scrape(gateway.metricsPort) : null
      const from = monotonicMicros()
      const ranBefore = cpuNanos(gateway.child.pid)
      const r = await load({
        url: gateway.url,
        headers: side.headers,
        connections: CONNECTIONS,
        seconds,
        rate: RATE,
        pid: gateway.child.pid,
      })
      // Rounds of a few seconds: load()'s clock ticks (10 ms) would be 1 % of a round's CPU.
      r.cpuMicros = (cpuNanos(gateway.child.pid) - ranBefore) / 1_000 / r.requests
      console.error(roundLine(`${side.name.padEnd(6)} ${label}`, r))
      if (counted) {
        spans.push({ side: side.name, from, to: monotonicMicros() })
        const after = await scrape(gateway.metricsPort)
        for (const [name, [series, ...labels]] of Object.entries(COUNTERS) as [
          keyof typeof COUNTERS,
          readonly string[],
        ][])
          side.moved[name] += metric(after, series!, ...labels) - metric(before, series!, ...labels)
      }
      return r
    }
    const byName = (name: SideName) => sides.find((s) => s.name === name)!
    console.error(`warming up, ${WARMUP_ROUNDS} × ${WARMUP} s a side…`)
    for (let pass = 1; pass <= WARMUP_ROUNDS; pass++)
      for (const side of sides) await measure(side, WARMUP, `warm-up ${pass}`, false)
    console.error(`measuring, ${TRIOS} trios of ${DURATION} s a side at ${RATE} requests a second…`)
    for (let trio = 0; trio < TRIOS; trio++)
      for (const name of ORDERS[trio % ORDERS.length]!) {
        const side = byName(name)
        side.rounds.push(await measure(side, DURATION, `trio ${trio + 1}`, true))
      }
    if (SPANS !== null) writeFileSync(SPANS, JSON.stringify(spans))
    report(sides, gateway, pins)
  } catch (err) {
    if (!isInterrupted()) for (const server of started) console.error(`${server.url} wrote:\n${server.output()}`)
    throw err
  } finally {
    for (const server of started.reverse()) await stopChild(server.child).catch((err) => console.error(err))
    await db.drop()
    rmSync(configDir, { recursive: true, force: true })
  }
})

function report(sides: Side[], gateway: Gateway, pins: ReturnType<typeof pinning>): void {
  const [credit, none, noneB] = sides as [Side, Side, Side]
  const ratioLine = (what: string, r: ReturnType<typeof roundRatios>, target = '') =>
    `${what.padEnd(14)} CPU/request median ${r.median.toFixed(3)} (quartiles ${r.q1.toFixed(3)} to ${r.q3.toFixed(3)})${target}; trios ${r.each.map((x) => x.toFixed(3)).join(', ')}`
  const verdict = roundRatios(credit.rounds, none.rounds)
  const floor = roundRatios(noneB.rounds, none.rounds)
  const lines = [
    ...reportHead('bench:credit-cpu'),
    `gateway   ${gateway.command}, one process, one route reporting tokens (X-Tokens-Used: 42 an answer)`,
    `sides     credit: a sub-account whose credit of tokens is required, 10^12 granted; none and none-b: sub-accounts without limits; each of its own parent`,
    `load      GET ${PROXIED_PATH}, ${CONNECTIONS} keep-alive connections, ${fmt(RATE)} requests a second; ${WARMUP_ROUNDS} × ${WARMUP} s a side to warm up, then ${TRIOS} trios of ${DURATION} s a side, the six orders in turn, each round after ${LEAD} s of its side's load unmeasured`,
    pins === null
      ? 'pinning   none (BENCH_PIN=1 puts the gateway on a CPU of its own)'
      : `pinning   the gateway on CPU ${pins.server}; the load and the upstream on CPU ${pins.rest} (Redis and Postgres wherever the scheduler puts them)`,
    '',
    ...table(
      ['side', ...ROUND_COLUMNS, 'lease calls', 'lease waits', 'Redis lookups', 'Postgres lookups'],
      sides.map((s) => [
        s.name,
        ...roundCells(medianOf(s.rounds)),
        ...[s.moved.leaseCalls, s.moved.coldWaits, s.moved.redis, s.moved.postgres].map(fmt),
      ]),
    ),
    "(medians over the trios, requests their sum; CPU µs/req: the gateway's threads' run time over a round (/proc/<pid>/task/*/schedstat), per request answered; the last four: what the gateway's counters moved by over the side's measured rounds (not their lead-ins), summed: lease calls to Redis, requests that waited for a lease, lookups of the tenancy cache's lower tiers)",
    '',
    ratioLine('credit / none', verdict, ` (target ≤ 1.03: ${verdict.median <= 1.03 ? 'met' : 'NOT MET'})`),
    ratioLine('none-b / none', floor, ' (A/A: the noise floor)'),
    `credit − none  ${(medianOf(credit.rounds).cpuMicros - medianOf(none.rounds).cpuMicros).toFixed(1)} µs CPU a request (medians)`,
  ]
  console.log(lines.join('\n'))
  const log = gateway.output().trim()
  if (log !== '') console.error(`the gateway wrote:\n${log}`)
}
