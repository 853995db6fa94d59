// Throughput of the proxied path: the gateway against a bare @fastify/http-proxy and against the
// floor (node:http streaming through an undici Pool: the least a Node proxy does), and optionally
// against another checkout of the gateway in the same run (BENCH_BASELINE_TREE), and optionally the
// same gateway acting as a tenant under limits that never refuse (BENCH_LIMITS=1), and optionally
// the same gateway on a route with a cost and a meter its upstream reports (BENCH_METERS=1), and on
// that route under a required credit (BENCH_CREDITS=1), and
// optionally the same gateway tracing one request in a hundred and every request (BENCH_TRACES=1). bench/README.md
// says what it starts, what it prints and its knobs; docs/lifecycle.md the path measured.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import {
  type BenchLimits,
  createDatabase,
  envInt,
  fmt,
  type Gateway,
  gitDescription,
  isInterrupted,
  load,
  type Measured,
  medianOf,
  metric,
  ms,
  reportHead,
  ROUND_COLUMNS,
  roundCells,
  roundLine,
  run,
  scrape,
  type Server,
  seedActing,
  seedCredited,
  sleep,
  startBare,
  startGateway,
  startUpstream,
  stopChild,
  table,
} from './lib.js'
import { type Sink, startSink } from './otlp-sink.js'

const DURATION = envInt('BENCH_DURATION', 5)
const CONNECTIONS = envInt('BENCH_CONNECTIONS', 50)
/**
 * Requests a second for every side alike (0: as many as each takes). Below every side's maximum,
 * CPU per request compares the same load: no side pays for being slower (peers waiting longer).
 */
const RATE = envInt('BENCH_RATE', 0, 0)
const ROUNDS = envInt('BENCH_ROUNDS', 6)
const WARMUP = envInt('BENCH_WARMUP', 5)
// Two: after one, the gateway's first measured round was its slowest of six in 13 of 14 runs, 15–40%
// above the others, with V8's worker threads busy; after a second it was not.
const WARMUP_ROUNDS = envInt('BENCH_WARMUP_ROUNDS', 2)
const BASELINE_TREE = process.env.BENCH_BASELINE_TREE || null
const LIMITS = envInt('BENCH_LIMITS', 0, 0) > 0
/** A side under the limits side's limits in shadow (counted, never refusing): needs BENCH_LIMITS. */
const SHADOW = LIMITS && envInt('BENCH_SHADOW', 0, 0) > 0
/** Adds the gateway on a route with `cost: 2` and a meter the upstream reports in every answer. */
const METERS = envInt('BENCH_METERS', 0, 0) > 0
/**
 * Adds the meters side's route acting as a sub-account whose credit of that meter is required and
 * granted 10^12 units (never exhausted): the credits and meters sides differ by the credit only.
 * Needs BENCH_METERS.
 */
const CREDITS = METERS && envInt('BENCH_CREDITS', 0, 0) > 0
/**
 * Adds the gateway tracing to a collector that takes every export (a sink in this process): at a
 * ratio of 0.01 (`traced-0.01`) and every request (`traced`).
 */
const TRACES = envInt('BENCH_TRACES', 0, 0) > 0
/** Adds fastify over the floor's handler: what fastify itself costs a request. */
const FASTIFY_FLOOR = envInt('BENCH_FASTIFY_FLOOR', 0, 0) > 0
/** Adds the floor with the headers the contract puts on every exchange: what those alone cost. */
const HEADERS_FLOOR = envInt('BENCH_HEADERS_FLOOR', 0, 0) > 0
/** Never refusing, so that the side measures the cost of deciding, on both levels (docs/api.md). */
const NEVER_REFUSING: BenchLimits = { rate: { requests: 1e9, per_seconds: 1 }, monthly_quota: { requests: 1e9 } }
const POLICIES = ['sub_account.rate', 'sub_account.monthly_quota', 'account.rate', 'account.monthly_quota']

type SideName =
  | 'floor'
  | 'headers-floor'
  | 'fastify-floor'
  | 'bare'
  | 'gateway'
  | 'limits'
  | 'shadow'
  | 'meters'
  | 'credits'
  | 'traced-0.01'
  | 'traced'
  | 'baseline'
/** The sides that are not a gateway: no auth, no metrics to scrape. */
const isProxyOnly = (name: SideName) =>
  name === 'floor' || name === 'headers-floor' || name === 'fastify-floor' || name === 'bare'
interface Side {
  name: SideName
  server: Server | Gateway
  headers: Record<string, string>
}
interface Round extends Measured {
  side: SideName
  round: string
}
/** What a gateway's lookups did over its measured rounds: every in-process miss made a request wait. */
interface Lookups {
  redis: number
  postgres: number
  waited: number
  refreshes: number
  /** Under limits: requests that awaited a first lease, lease calls sent, refusals. */
  coldWaits: number
  leaseCalls: number
  refused: number
}

async function main(): Promise<void> {
  const db = await createDatabase('bench')
  const started: Server[] = []
  let sink: Sink | null = null
  const configDir = mkdtempSync(join(tmpdir(), 'bench-meters-'))
  try {
    const upstream = await startUpstream({ meter: METERS })
    started.push(upstream)
    const bare = await startBare(upstream.url)
    started.push(bare)
    const floor = await startBare(upstream.url, {}, 'floor')
    started.push(floor)
    const fastifyFloor = FASTIFY_FLOOR ? await startBare(upstream.url, {}, 'fastify-floor') : null
    if (fastifyFloor !== null) started.push(fastifyFloor)
    const headersFloor = HEADERS_FLOOR ? await startBare(upstream.url, {}, 'headers-floor') : null
    if (headersFloor !== null) started.push(headersFloor)
    const gateway = await startGateway({ databaseUrl: db.url, upstreamUrl: upstream.url })
    started.push(gateway)
    const baseline =
      BASELINE_TREE === null
        ? null
        : await startGateway({ databaseUrl: db.url, upstreamUrl: upstream.url, tree: BASELINE_TREE })
    if (baseline !== null) started.push(baseline)
    // The same build in a process of its own, so that each gateway idles through the others' rounds
    // alike (sharing one, the second side's rounds would follow the first's garbage at once).
    const limitsGateway = LIMITS ? await startGateway({ databaseUrl: db.url, upstreamUrl: upstream.url }) : null
    if (limitsGateway !== null) started.push(limitsGateway)
    const shadowGateway = SHADOW ? await startGateway({ databaseUrl: db.url, upstreamUrl: upstream.url }) : null
    if (shadowGateway !== null) started.push(shadowGateway)
    // The same build again, its proxied path on a route that weighs each request 2 and reads the
    // units the upstream reports (X-Tokens-Used, in every answer): the two sides differ by the meter only.
    const metersConfig = join(configDir, 'gateway.yaml')
    writeFileSync(
      metersConfig,
      `routes:\n  - prefix: /v1/things\n    upstream: ${upstream.url}\n    cost: 2\n    meters: [{ name: tokens, header: X-Tokens-Used }]\n`,
    )
    sink = TRACES ? await startSink() : null
    const tracing = (sampler: string) => ({
      OTEL_EXPORTER_OTLP_ENDPOINT: sink!.url,
      OTEL_TRACES_SAMPLER: sampler,
      OTEL_TRACES_SAMPLER_ARG: '0.01',
    })
    const sampledGateway = TRACES
      ? await startGateway({ databaseUrl: db.url, upstreamUrl: upstream.url, env: tracing('parentbased_traceidratio') })
      : null
    if (sampledGateway !== null) started.push(sampledGateway)
    const tracedGateway = TRACES
      ? await startGateway({ databaseUrl: db.url, upstreamUrl: upstream.url, env: tracing('parentbased_always_on') })
      : null
    if (tracedGateway !== null) started.push(tracedGateway)
    const metersGateway = METERS
      ? await startGateway({ databaseUrl: db.url, upstreamUrl: upstream.url, env: { GATEWAY_CONFIG: metersConfig } })
      : null
    if (metersGateway !== null) started.push(metersGateway)
    const creditsGateway = CREDITS
      ? await startGateway({ databaseUrl: db.url, upstreamUrl: upstream.url, env: { GATEWAY_CONFIG: metersConfig } })
      : null
    if (creditsGateway !== null) started.push(creditsGateway)
    const acting = await seedActing(gateway, db.url)
    // Another parent whose account and sub-account have limits: the two sides differ by them only.
    const limited =
      limitsGateway === null
        ? null
        : await seedActing(limitsGateway, db.url, { account: NEVER_REFUSING, subAccount: NEVER_REFUSING })
    // A third parent with the same limits in shadow: the shadow and limits sides differ by that only.
    const shadowed =
      shadowGateway === null
        ? null
        : await seedActing(shadowGateway, db.url, {
            account: { ...NEVER_REFUSING, shadow: true },
            subAccount: { ...NEVER_REFUSING, shadow: true },
          })
    // A fourth parent whose sub-account needs a credit of the meter, granted far beyond the run.
    const credited = creditsGateway === null ? null : await seedCredited(creditsGateway, db.url)
    // The bare proxy and the floor get the same request, Authorization and acting header included, and pass them on.
    const sides: Side[] = [
      { name: 'floor', server: floor, headers: acting.headers },
      ...(fastifyFloor === null
        ? []
        : [{ name: 'fastify-floor' as const, server: fastifyFloor, headers: acting.headers }]),
      ...(headersFloor === null
        ? []
        : [{ name: 'headers-floor' as const, server: headersFloor, headers: acting.headers }]),
      { name: 'bare', server: bare, headers: acting.headers },
      { name: 'gateway', server: gateway, headers: acting.headers },
      ...(limited === null ? [] : [{ name: 'limits' as const, server: limitsGateway!, headers: limited.headers }]),
      ...(shadowed === null ? [] : [{ name: 'shadow' as const, server: shadowGateway!, headers: shadowed.headers }]),
      ...(metersGateway === null ? [] : [{ name: 'meters' as const, server: metersGateway, headers: acting.headers }]),
      ...(credited === null ? [] : [{ name: 'credits' as const, server: creditsGateway!, headers: credited.headers }]),
      ...(sampledGateway === null
        ? []
        : [{ name: 'traced-0.01' as const, server: sampledGateway, headers: acting.headers }]),
      ...(tracedGateway === null ? [] : [{ name: 'traced' as const, server: tracedGateway, headers: acting.headers }]),
      ...(baseline === null ? [] : [{ name: 'baseline' as const, server: baseline, headers: acting.headers }]),
    ]

    // Pre-flight: every side reaches the upstream, and a gateway really acts as the sub-account.
    for (const side of sides) {
      const response = await fetch(`${side.server.url}/v1/things/echo`, { headers: side.headers })
      const seen = (await response.json()) as Record<string, string>
      if (response.status !== 200)
        throw new Error(`${side.name}: GET /v1/things/echo answered ${response.status}: ${JSON.stringify(seen)}`)
      const tenant =
        side.name === 'limits'
          ? limited!
          : side.name === 'shadow'
            ? shadowed!
            : side.name === 'credits'
              ? credited!
              : acting
      if (
        !isProxyOnly(side.name) &&
        (seen['x-service-resolved-tenant'] !== tenant.subId || seen['x-service-caller-tenant'] !== tenant.parentId)
      ) {
        throw new Error(
          `${side.name}: the upstream saw tenant ${seen['x-service-resolved-tenant']} for ${seen['x-service-caller-tenant']}`,
        )
      }
      // Under limits, every level's rate and quota applies; elsewhere none does.
      const policy = response.headers.get('ratelimit-policy') ?? ''
      const applied = POLICIES.filter((name) => policy.includes(`"${name}"`))
      if (applied.length !== (side.name === 'limits' ? POLICIES.length : 0))
        throw new Error(`${side.name}: RateLimit-Policy is "${policy}"`)
      // The meter's side takes the report out of the answer; every other passes it on.
      const reported = response.headers.get('x-tokens-used')
      if (METERS && (reported === null) !== (side.name === 'meters' || side.name === 'credits'))
        throw new Error(`${side.name}: X-Tokens-Used is ${reported}`)
    }

    const measure = async (side: Side, seconds: number, round: string): Promise<Round> => {
      await sleep(500)
      const r = await load({
        url: side.server.url,
        headers: side.headers,
        connections: CONNECTIONS,
        seconds,
        ...(RATE > 0 ? { rate: RATE } : {}),
        pid: side.server.child.pid,
      })
      console.error(roundLine(`${side.name} ${round}`, r))
      return { ...r, side: side.name, round }
    }
    console.error(`warming up, ${WARMUP_ROUNDS} × ${WARMUP} s per side…`)
    for (let pass = 1; pass <= WARMUP_ROUNDS; pass++)
      for (const side of sides) await measure(side, WARMUP, `warm-up ${pass}`)

    // Alternating sides, so that a slow patch of a noisy machine does not land on one side only;
    // each round starts one side later, so that no side always runs in the same place (an A/A run,
    // the same commit on two sides, found the last side 4 % cheaper when the order was fixed).
    console.error(`measuring, ${ROUNDS} × ${DURATION} s per side…`)
    const rounds: Round[] = []
    const lookups = new Map<SideName, Lookups>()
    for (let r = 1; r <= ROUNDS; r++) {
      const shift = (r - 1) % sides.length
      for (const side of [...sides.slice(shift), ...sides.slice(0, shift)]) {
        if (isProxyOnly(side.name)) {
          rounds.push(await measure(side, DURATION, String(r)))
          continue
        }
        // A gateway idles through the other sides' rounds, longer than its in-process TTL: one
        // request warms it again, so that its round shows what a request waits for once warm.
        await fetch(`${side.server.url}/v1/things/1`, { headers: side.headers }).then((res) => res.text())
        const { metricsPort } = side.server as Gateway
        const before = await scrape(metricsPort)
        rounds.push(await measure(side, DURATION, String(r)))
        const after = await scrape(metricsPort)
        const delta = (name: string, ...labels: string[]) =>
          metric(after, name, ...labels) - metric(before, name, ...labels)
        const sum = lookups.get(side.name) ?? {
          ...{ redis: 0, postgres: 0, waited: 0, refreshes: 0 },
          ...{ coldWaits: 0, leaseCalls: 0, refused: 0 },
        }
        sum.redis += delta('tgw_store_lookups_total', 'tier="redis"')
        sum.postgres += delta('tgw_store_lookups_total', 'tier="postgres"')
        sum.waited += delta('tgw_cache_misses_total', 'tier="local"')
        sum.refreshes += delta('tgw_cache_refreshes_total')
        sum.coldWaits += delta('tgw_limit_cold_waits_total')
        sum.leaseCalls += delta('tgw_limit_lease_calls_total')
        sum.refused += delta('tgw_limit_decisions_total', 'outcome="refused"')
        lookups.set(side.name, sum)
      }
    }
    const coldWaits =
      limitsGateway === null ? 0 : metric(await scrape(limitsGateway.metricsPort), 'tgw_limit_cold_waits_total')
    const dropped =
      tracedGateway === null
        ? null
        : {
            sampled: metric(await scrape(sampledGateway!.metricsPort), 'tgw_trace_spans_dropped_total'),
            traced: metric(await scrape(tracedGateway.metricsPort), 'tgw_trace_spans_dropped_total'),
            exports: sink!.exports(),
          }
    report(rounds, sides, lookups, started, coldWaits, dropped)
  } catch (err) {
    if (!isInterrupted()) for (const server of started) console.error(`${server.url} wrote:\n${server.output()}`)
    throw err
  } finally {
    // The gateways first, so that the database is idle when it is dropped.
    for (const server of started.reverse()) await stopChild(server.child).catch((err) => console.error(err))
    await db.drop()
    rmSync(configDir, { recursive: true, force: true })
    await sink?.close()
  }
}

function report(
  rounds: Round[],
  sides: Side[],
  lookups: Map<SideName, Lookups>,
  started: Server[],
  coldWaits: number,
  dropped: { sampled: number; traced: number; exports: number } | null,
): void {
  const of = (side: SideName) => rounds.filter((r) => r.side === side && !r.round.startsWith('warm'))
  const medians = new Map(sides.map(({ name }) => [name, { ...medianOf(of(name)), side: name, round: 'median' }]))
  const [floor, bare, gateway, baseline] = [
    medians.get('floor')!,
    medians.get('bare')!,
    medians.get('gateway')!,
    medians.get('baseline'),
  ]
  const limits = medians.get('limits')
  const shadow = medians.get('shadow')
  const meters = medians.get('meters')
  const credits = medians.get('credits')
  const fastifyFloor = medians.get('fastify-floor')
  const headersFloor = medians.get('headers-floor')
  const lines = [
    ...reportHead('bench:proxy'),
    `load      GET /v1/things/1, ${CONNECTIONS} keep-alive connections${RATE > 0 ? `, ${RATE} requests a second to each side` : ''}; ${WARMUP_ROUNDS} × ${WARMUP} s per side to warm up, then ${ROUNDS} × ${DURATION} s per side, alternating`,
    `floor     node bench/servers.js floor (node:http + an undici Pool, no auth), the gateway's node flags`,
    ...(FASTIFY_FLOOR
      ? ["fastify-floor node bench/servers.js fastify-floor (fastify over the floor's handler, the reply hijacked)"]
      : []),
    ...(HEADERS_FLOOR
      ? [
          "headers-floor node bench/servers.js headers-floor (the floor with the contract's headers each way, fixed values)",
        ]
      : []),
    `bare      node bench/servers.js bare (fastify + @fastify/http-proxy, no auth), the gateway's node flags`,
    ...sides
      .filter((s) => !isProxyOnly(s.name))
      .map(
        (s) =>
          `${s.name.padEnd(9)} ${(s.server as Gateway).command}, at ${gitDescription(s.name === 'baseline' ? BASELINE_TREE! : undefined)}; parent key acting as ext:bench-sub` +
          (s.name === 'limits' ? ` of another parent, both with a rate of 10^9/1 s and a monthly quota of 10^9` : '') +
          (s.name === 'shadow'
            ? ' of a third parent, both with the same limits in shadow (never refusing, no RateLimit fields)'
            : '') +
          (s.name === 'meters' ? '; the route has cost 2 and a meter read from X-Tokens-Used' : '') +
          (s.name === 'credits'
            ? ` of a fourth parent; the meters side's route, the sub-account's credit of its meter required, 10^12 granted`
            : '') +
          (s.name === 'traced-0.01' ? '; tracing, OTEL_TRACES_SAMPLER=parentbased_traceidratio at 0.01' : '') +
          (s.name === 'traced' ? '; tracing every request (parentbased_always_on)' : ''),
      ),
    '',
    ...table(
      ['side', 'round', ...ROUND_COLUMNS],
      [...rounds.filter((r) => !r.round.startsWith('warm')), ...medians.values()].map((r) => [
        r.side,
        r.round,
        ...roundCells(r),
      ]),
      2,
    ),
    "(median rows: medians over the rounds, requests their sum; CPU µs/req: the server process's user + system time over the round, per request)",
    // Whether a gap is JavaScript or the kernel's (the sockets' system calls): the main thread's split.
    `main thread µs/req, user + kernel: ${[...medians.values()]
      .map(
        (m) =>
          `${m.side} ${(m.mainThreadMicros - m.mainThreadSystemMicros).toFixed(1)} + ${m.mainThreadSystemMicros.toFixed(1)}`,
      )
      .join(', ')}`,
    '',
    `gateway / bare      req/s ${(gateway.perSecond / bare.perSecond).toFixed(3)} (target ≥ 0.95: ${gateway.perSecond / bare.perSecond >= 0.95 ? 'met' : 'NOT MET'}), ` +
      `p50 ${(gateway.p50 / bare.p50).toFixed(3)}, p99 ${(gateway.p99 / bare.p99).toFixed(3)}, CPU/request ${(gateway.cpuMicros / bare.cpuMicros).toFixed(3)}`,
    // Each gateway round against the bare round just before it: how far one round's noise reaches.
    `                    req/s round by round: ${of('gateway')
      .map((g, i) => (g.perSecond / of('bare')[i]!.perSecond).toFixed(3))
      .join(', ')}`,
    `gateway / floor     req/s ${(gateway.perSecond / floor.perSecond).toFixed(3)} (target ≥ 0.85: ${gateway.perSecond / floor.perSecond >= 0.85 ? 'met' : 'NOT MET'}), ` +
      `p50 ${(gateway.p50 / floor.p50).toFixed(3)}, p99 ${(gateway.p99 / floor.p99).toFixed(3)} (${ms(gateway.p99 - floor.p99)} ms above), CPU/request ${(gateway.cpuMicros / floor.cpuMicros).toFixed(3)}`,
    `                    req/s round by round: ${of('gateway')
      .map((g, i) => (g.perSecond / of('floor')[i]!.perSecond).toFixed(3))
      .join(', ')}`,
    ...(fastifyFloor === undefined
      ? []
      : [
          `fastify-floor/floor req/s ${(fastifyFloor.perSecond / floor.perSecond).toFixed(3)}, p99 ${(fastifyFloor.p99 / floor.p99).toFixed(3)}, ` +
            `CPU/request ${(fastifyFloor.cpuMicros / floor.cpuMicros).toFixed(3)} (${(fastifyFloor.cpuMicros - floor.cpuMicros).toFixed(1)} µs: fastify's own cost)`,
        ]),
    ...(headersFloor === undefined
      ? []
      : [
          `headers-floor/floor req/s ${(headersFloor.perSecond / floor.perSecond).toFixed(3)}, p99 ${(headersFloor.p99 / floor.p99).toFixed(3)}, ` +
            `CPU/request ${(headersFloor.cpuMicros / floor.cpuMicros).toFixed(3)} (${(headersFloor.cpuMicros - floor.cpuMicros).toFixed(1)} µs: the contract's headers)`,
          `gateway / headers-floor req/s ${(gateway.perSecond / headersFloor.perSecond).toFixed(3)}, p99 ${(gateway.p99 / headersFloor.p99).toFixed(3)}, ` +
            `CPU/request ${(gateway.cpuMicros / headersFloor.cpuMicros).toFixed(3)}`,
        ]),
    `bare / floor        req/s ${(bare.perSecond / floor.perSecond).toFixed(3)}, CPU/request ${(bare.cpuMicros / floor.cpuMicros).toFixed(3)}`,
  ]
  if (limits !== undefined) {
    const ratio = limits.perSecond / gateway.perSecond
    lines.push(
      `limits / gateway    req/s ${ratio.toFixed(3)} (target ≥ 0.95: ${ratio >= 0.95 ? 'met' : 'NOT MET'}), ` +
        `p50 ${(limits.p50 / gateway.p50).toFixed(3)}, p99 ${(limits.p99 / gateway.p99).toFixed(3)}, CPU/request ${(limits.cpuMicros / gateway.cpuMicros).toFixed(3)}`,
      `                    req/s round by round: ${of('limits')
        .map((l, i) => (l.perSecond / of('gateway')[i]!.perSecond).toFixed(3))
        .join(', ')}`,
    )
  }
  if (shadow !== undefined && limits !== undefined)
    lines.push(
      // Issue 61: a shadow limit costs what an enforced one does (counted the same, refusing nothing).
      `shadow / limits     req/s ${(shadow.perSecond / limits.perSecond).toFixed(3)}, p99 ${(shadow.p99 / limits.p99).toFixed(3)}, ` +
        `CPU/request ${(shadow.cpuMicros / limits.cpuMicros).toFixed(3)} (${(shadow.cpuMicros - limits.cpuMicros).toFixed(1)} µs)`,
      `                    req/s round by round: ${of('shadow')
        .map((l, i) => (l.perSecond / of('limits')[i]!.perSecond).toFixed(3))
        .join(', ')}`,
    )
  if (meters !== undefined) {
    const cpu = meters.cpuMicros / gateway.cpuMicros
    lines.push(
      `meters / gateway    req/s ${(meters.perSecond / gateway.perSecond).toFixed(3)}, p99 ${(meters.p99 / gateway.p99).toFixed(3)}, ` +
        `CPU/request ${cpu.toFixed(3)} (target ≤ 1.03: ${cpu <= 1.03 ? 'met' : 'NOT MET'}; ${(meters.cpuMicros - gateway.cpuMicros).toFixed(1)} µs)`,
      `                    req/s round by round: ${of('meters')
        .map((m, i) => (m.perSecond / of('gateway')[i]!.perSecond).toFixed(3))
        .join(', ')}`,
    )
  }
  if (credits !== undefined && meters !== undefined) {
    const cpu = credits.cpuMicros / meters.cpuMicros
    lines.push(
      `credits / meters    req/s ${(credits.perSecond / meters.perSecond).toFixed(3)}, p99 ${(credits.p99 / meters.p99).toFixed(3)}, ` +
        `CPU/request ${cpu.toFixed(3)} (target ≤ 1.03: ${cpu <= 1.03 ? 'met' : 'NOT MET'}; ${(credits.cpuMicros - meters.cpuMicros).toFixed(1)} µs)`,
      `                    req/s round by round: ${of('credits')
        .map((c, i) => (c.perSecond / of('meters')[i]!.perSecond).toFixed(3))
        .join(', ')}`,
    )
  }
  for (const [name, target] of [
    ['traced-0.01', 1.03],
    ['traced', 1.2],
  ] as const) {
    const traced = medians.get(name)
    if (traced === undefined) continue
    const cpu = traced.cpuMicros / gateway.cpuMicros
    lines.push(
      `${`${name} / gateway`.padEnd(20)}req/s ${(traced.perSecond / gateway.perSecond).toFixed(3)}, p99 ${(traced.p99 / gateway.p99).toFixed(3)}, ` +
        `CPU/request ${cpu.toFixed(3)} (target ≤ ${target}: ${cpu <= target ? 'met' : 'NOT MET'}; ${(traced.cpuMicros - gateway.cpuMicros).toFixed(1)} µs)`,
    )
  }
  if (dropped !== null)
    lines.push(
      `traces              spans dropped over the run: traced-0.01 ${fmt(dropped.sampled)}, traced ${fmt(dropped.traced)}; exports the sink took: ${fmt(dropped.exports)}`,
    )
  if (baseline !== undefined) {
    lines.push(
      `baseline / bare     req/s ${(baseline.perSecond / bare.perSecond).toFixed(3)}, CPU/request ${(baseline.cpuMicros / bare.cpuMicros).toFixed(3)}`,
      `gateway / baseline  req/s ${(gateway.perSecond / baseline.perSecond).toFixed(3)}, CPU/request ${(gateway.cpuMicros / baseline.cpuMicros).toFixed(3)}`,
    )
  }
  for (const [name, l] of lookups) {
    lines.push(
      `${name} lookups    over its measured rounds (${fmt(medians.get(name)!.requests)} requests): ${fmt(l.postgres)} Postgres and ${fmt(l.redis)} Redis, ` +
        `of which ${fmt(l.refreshes)} background refreshes; requests that waited for one (in-process misses): ${fmt(l.waited)}`,
    )
  }
  const limited = lookups.get('limits')
  if (limited !== undefined) {
    lines.push(
      `limits decisions    over its measured rounds: ${fmt(limited.refused)} refused, ${fmt(limited.leaseCalls)} lease calls (background); ` +
        `requests that waited for a first lease: ${fmt(limited.coldWaits)}; over the whole run ${fmt(coldWaits)} ` +
        `(untimed: a limit idle for 10 s is forgotten, so each round's warming request waits, and each warm-up round's first requests until the leases answer)`,
    )
  }
  console.log(lines.join('\n'))
  const log = started.map((s) => s.output().trim()).filter((text) => text !== '')
  if (log.length > 0) console.error(`the servers wrote:\n${log.join('\n')}`)
}

run(main)
