// Throughput of the proxied path: the gateway against a bare @fastify/http-proxy, and optionally
// against another checkout of the gateway in the same run (BENCH_BASELINE_TREE). bench/README.md
// says what it starts, what it prints and its knobs; docs/architecture.md the path measured.
import {
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
  reportHead,
  ROUND_COLUMNS,
  roundCells,
  run,
  scrape,
  type Server,
  seedActing,
  sleep,
  startBare,
  startGateway,
  startUpstream,
  stopChild,
  table,
} from './lib.js'

const DURATION = envInt('BENCH_DURATION', 5)
const CONNECTIONS = envInt('BENCH_CONNECTIONS', 50)
const ROUNDS = envInt('BENCH_ROUNDS', 6)
const WARMUP = envInt('BENCH_WARMUP', 5)
// Two: after one, the gateway's first measured round was its slowest of six in 13 of 14 runs, 15–40%
// above the others, with V8's worker threads busy; after a second it was not.
const WARMUP_ROUNDS = envInt('BENCH_WARMUP_ROUNDS', 2)
const BASELINE_TREE = process.env.BENCH_BASELINE_TREE || null

type SideName = 'bare' | 'gateway' | 'baseline'
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
}

async function main(): Promise<void> {
  const db = await createDatabase('bench')
  const started: Server[] = []
  try {
    const upstream = await startUpstream()
    started.push(upstream)
    const bare = await startBare(upstream.url)
    started.push(bare)
    const gateway = await startGateway({ databaseUrl: db.url, upstreamUrl: upstream.url })
    started.push(gateway)
    const baseline =
      BASELINE_TREE === null
        ? null
        : await startGateway({ databaseUrl: db.url, upstreamUrl: upstream.url, tree: BASELINE_TREE })
    if (baseline !== null) started.push(baseline)
    const acting = await seedActing(gateway, db.url)
    // The bare proxy gets the same request, Authorization and acting header included, and passes them on.
    const sides: Side[] = [
      { name: 'bare', server: bare, headers: acting.headers },
      { name: 'gateway', server: gateway, headers: acting.headers },
      ...(baseline === null ? [] : [{ name: 'baseline' as const, server: baseline, headers: acting.headers }]),
    ]

    // Pre-flight: every side reaches the upstream, and a gateway really acts as the sub-account.
    for (const side of sides) {
      const response = await fetch(`${side.server.url}/v1/things/echo`, { headers: side.headers })
      const seen = (await response.json()) as Record<string, string>
      if (response.status !== 200)
        throw new Error(`${side.name}: GET /v1/things/echo answered ${response.status}: ${JSON.stringify(seen)}`)
      if (
        side.name !== 'bare' &&
        (seen['x-service-resolved-tenant'] !== acting.subId || seen['x-service-caller-tenant'] !== acting.parentId)
      ) {
        throw new Error(
          `${side.name}: the upstream saw tenant ${seen['x-service-resolved-tenant']} for ${seen['x-service-caller-tenant']}`,
        )
      }
    }

    const measure = async (side: Side, seconds: number, round: string): Promise<Round> => {
      await sleep(500)
      const r = await load({
        url: side.server.url,
        headers: side.headers,
        connections: CONNECTIONS,
        seconds,
        pid: side.server.child.pid,
      })
      console.error(
        `  ${side.name} ${round}: ${fmt(r.perSecond)} req/s, p50 ${r.p50.toFixed(3)} ms, p99 ${r.p99.toFixed(3)} ms, ${r.cpuMicros.toFixed(1)} µs CPU/request`,
      )
      return { ...r, side: side.name, round }
    }
    console.error(`warming up, ${WARMUP_ROUNDS} × ${WARMUP} s per side…`)
    for (let pass = 1; pass <= WARMUP_ROUNDS; pass++)
      for (const side of sides) await measure(side, WARMUP, `warm-up ${pass}`)

    // Alternating sides, so that a slow patch of a noisy machine does not land on one side only.
    console.error(`measuring, ${ROUNDS} × ${DURATION} s per side…`)
    const rounds: Round[] = []
    const lookups = new Map<SideName, Lookups>()
    for (let r = 1; r <= ROUNDS; r++) {
      for (const side of sides) {
        if (side.name === 'bare') {
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
        const sum = lookups.get(side.name) ?? { redis: 0, postgres: 0, waited: 0, refreshes: 0 }
        sum.redis += delta('tgw_store_lookups_total', 'tier="redis"')
        sum.postgres += delta('tgw_store_lookups_total', 'tier="postgres"')
        sum.waited += delta('tgw_cache_misses_total', 'tier="local"')
        sum.refreshes += delta('tgw_cache_refreshes_total')
        lookups.set(side.name, sum)
      }
    }
    report(rounds, sides, lookups, started)
  } catch (err) {
    if (!isInterrupted()) for (const server of started) console.error(`${server.url} wrote:\n${server.output()}`)
    throw err
  } finally {
    // The gateways first, so that the database is idle when it is dropped.
    for (const server of started.reverse()) await stopChild(server.child).catch((err) => console.error(err))
    await db.drop()
  }
}

function report(rounds: Round[], sides: Side[], lookups: Map<SideName, Lookups>, started: Server[]): void {
  const of = (side: SideName) => rounds.filter((r) => r.side === side && !r.round.startsWith('warm'))
  const medians = new Map(sides.map(({ name }) => [name, { ...medianOf(of(name)), side: name, round: 'median' }]))
  const [bare, gateway, baseline] = [medians.get('bare')!, medians.get('gateway')!, medians.get('baseline')]
  const lines = [
    ...reportHead('bench:proxy'),
    `load      GET /v1/things/1, ${CONNECTIONS} keep-alive connections; ${WARMUP_ROUNDS} × ${WARMUP} s per side to warm up, then ${ROUNDS} × ${DURATION} s per side, alternating`,
    `bare      node bench/servers.js bare (fastify + @fastify/http-proxy, no auth), the gateway's node flags`,
    ...sides
      .filter((s) => s.name !== 'bare')
      .map(
        (s) =>
          `${s.name.padEnd(9)} ${(s.server as Gateway).command}, at ${gitDescription(s.name === 'baseline' ? BASELINE_TREE! : undefined)}; parent key acting as ext:bench-sub`,
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
    '',
    `gateway / bare      req/s ${(gateway.perSecond / bare.perSecond).toFixed(3)} (target ≥ 0.90: ${gateway.perSecond / bare.perSecond >= 0.9 ? 'met' : 'NOT MET'}), ` +
      `p50 ${(gateway.p50 / bare.p50).toFixed(3)}, p99 ${(gateway.p99 / bare.p99).toFixed(3)}, CPU/request ${(gateway.cpuMicros / bare.cpuMicros).toFixed(3)}`,
    // Each gateway round against the bare round just before it: how far one round's noise reaches.
    `                    req/s round by round: ${of('gateway')
      .map((g, i) => (g.perSecond / of('bare')[i]!.perSecond).toFixed(3))
      .join(', ')}`,
  ]
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
  console.log(lines.join('\n'))
  const log = started.map((s) => s.output().trim()).filter((text) => text !== '')
  if (log.length > 0) console.error(`the servers wrote:\n${log.join('\n')}`)
}

run(main)
