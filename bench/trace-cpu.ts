// CPU per proxied request of gateway processes (compiled, the image's Node) that differ by their
// tracing only: `off` and `off-b` (no OTLP endpoint: off-b/off is the same run's noise floor),
// `0.01` (parentbased_traceidratio at 0.01) and `always` (parentbased_always_on), the traced ones
// exporting OTLP/HTTP protobuf to a sink in this process that takes every export. With
// BENCH_BASELINE_TREE=<checkout>, `0.01-before` and `always-before` trace alike from that checkout:
// a change to tracing read against the tree before it, mode against mode. Every side is loaded at
// once, at one fixed rate each, in rounds of a few seconds: this machine's speed swings by two
// within seconds, and a side is compared only with what ran in the same seconds. bench/README.md.
import { resolve } from 'node:path'
import {
  cpuNanos,
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
  startGateway,
  startUpstream,
  stopChild,
  table,
} from './lib.js'
import { type Sink, startSink } from './otlp-sink.js'

const ROUNDS = envInt('BENCH_ROUNDS', 20)
const DURATION = envInt('BENCH_DURATION', 3)
/** Requests a second, every side alike: below the gateway's maximum, so that each does the same work a second. */
const RATE = envInt('BENCH_RATE', 800)
const CONNECTIONS = envInt('BENCH_CONNECTIONS', 16)
const WARMUP = envInt('BENCH_WARMUP', 5)
const WARMUP_ROUNDS = envInt('BENCH_WARMUP_ROUNDS', 2)
/** Seconds of load, unmeasured, before each round. */
const LEAD = envInt('BENCH_LEAD', 1, 0)
const BASELINE_TREE = process.env.BENCH_BASELINE_TREE || null
/**
 * BENCH_FRESH=1: new processes for every side before each round (then the warm-up again). Two
 * processes of the same build settle 5 to 10 % apart for good (an A/A of off-b/off read 0.932 over
 * 30 rounds): V8's tiering of each, by when its compiles land. New ones each round average that.
 */
const FRESH = envInt('BENCH_FRESH', 0, 0) > 0

/** The ratios read, and their targets where issue 84 sets one (docs/operations.md, Traces). */
const RATIOS: [on: string, off: string, target: number | null][] = [
  ['off-b', 'off', null],
  ['0.01', 'off', 1.03],
  ['always', 'off', 1.2],
  ['0.01', '0.01-before', null],
  ['always', 'always-before', null],
]

/** A gateway process's tracing (`env`) and build (`tree`, this one unless given). */
interface Kind {
  name: string
  env: NodeJS.ProcessEnv
  tree?: string
}

interface Side extends Kind {
  /** The side's process: a new one each round with BENCH_FRESH. */
  server: Gateway
  rounds: Measured[]
}

run(async () => {
  const db = await createDatabase('trace_cpu')
  const started: Server[] = []
  let sink: Sink | null = null
  // The gateways on a CPU of their own; the load (this process), the sink and the upstream on the others.
  const pins = pinning()
  if (pins !== null) pin([process.pid], pins.rest)
  try {
    const upstream = await startUpstream({ wrap: pinnedTo(pins?.rest) })
    started.push(upstream)
    sink = await startSink()
    const tracing = (sampler: string) => ({
      OTEL_EXPORTER_OTLP_ENDPOINT: sink!.url,
      OTEL_TRACES_SAMPLER: sampler,
      OTEL_TRACES_SAMPLER_ARG: '0.01',
    })
    const gateway = async (env: NodeJS.ProcessEnv, tree?: string) => {
      const server = await startGateway({
        databaseUrl: db.url,
        upstreamUrl: upstream.url,
        env,
        ...(tree === undefined ? {} : { tree }),
        wrap: pinnedTo(pins?.server),
      })
      started.push(server)
      return server
    }
    const kinds: Kind[] = [
      { name: 'off', env: {} },
      { name: 'off-b', env: {} },
      { name: '0.01', env: tracing('parentbased_traceidratio') },
      { name: 'always', env: tracing('parentbased_always_on') },
      ...(BASELINE_TREE === null
        ? []
        : [
            { name: '0.01-before', env: tracing('parentbased_traceidratio'), tree: BASELINE_TREE },
            { name: 'always-before', env: tracing('parentbased_always_on'), tree: BASELINE_TREE },
          ]),
    ]
    const sides: Side[] = []
    for (const kind of kinds) sides.push({ ...kind, server: await gateway(kind.env, kind.tree), rounds: [] })
    const { headers } = await seedActing(sides[0]!.server, db.url)
    const dropped = new Map<string, number>()
    const droppedBy = async (side: Side) =>
      dropped.set(
        side.name,
        (dropped.get(side.name) ?? 0) + metric(await scrape(side.server.metricsPort), 'tgw_trace_spans_dropped_total'),
      )
    /** New processes for every side, started in an order turned each time (FRESH). */
    const restart = async (turn: number) => {
      for (const side of sides) {
        await droppedBy(side)
        await stopChild(side.server.child)
        started.splice(started.indexOf(side.server), 1)
      }
      for (let i = 0; i < sides.length; i++) {
        const side = sides[(i + turn) % sides.length]!
        side.server = await gateway(side.env, side.tree)
      }
    }

    // Every side at once, at the same rate: a round's CPU per request of each is read over the same
    // seconds, so that the machine's speed, which swings by two within seconds here (another
    // tenant's threads on our cores), weighs on all sides of a round alike.
    const round = async (seconds: number, label: string, counted: boolean): Promise<void> => {
      // Pre-flight: every side reaches the upstream.
      for (const side of sides) {
        const response = await fetch(`${side.server.url}/v1/things/echo`, { headers })
        if (response.status !== 200) throw new Error(`${side.name}: ${response.status} ${await response.text()}`)
      }
      const at = (side: Side, pid?: number) =>
        load({ url: side.server.url, headers, connections: CONNECTIONS, seconds, rate: RATE, pid })
      if (LEAD > 0) await Promise.all(sides.map((side) => at(side)))
      const ranBefore = sides.map((side) => cpuNanos(side.server.child.pid))
      const measured = await Promise.all(sides.map((side) => at(side, side.server.child.pid)))
      sides.forEach((side, i) => {
        const r = measured[i]!
        // Rounds of a few seconds: load()'s clock ticks (10 ms) would be 1 % of a round's CPU.
        r.cpuMicros = (cpuNanos(side.server.child.pid) - ranBefore[i]!) / 1_000 / r.requests
        console.error(roundLine(`${side.name.padEnd(13)} ${label}`, r))
        if (counted) side.rounds.push(r)
      })
    }
    const warmUp = async () => {
      for (let pass = 1; pass <= WARMUP_ROUNDS; pass++) await round(WARMUP, `warm-up ${pass}`, false)
    }
    console.error(`warming up, ${WARMUP_ROUNDS} × ${WARMUP} s…`)
    await warmUp()
    console.error(
      `measuring, ${ROUNDS} rounds of ${DURATION} s, every side at ${RATE} requests a second at once${FRESH ? ', new processes each round' : ''}…`,
    )
    for (let n = 1; n <= ROUNDS; n++) {
      if (FRESH && n > 1) {
        await restart(n)
        await warmUp()
      }
      await round(DURATION, `round ${n}`, true)
    }
    for (const side of sides) await droppedBy(side)
    report(sides, pins, dropped, sink.exports())
  } catch (err) {
    if (!isInterrupted()) for (const server of started) console.error(`${server.url} wrote:\n${server.output()}`)
    throw err
  } finally {
    for (const server of started.reverse()) await stopChild(server.child).catch((err) => console.error(err))
    await sink?.close()
    await db.drop()
  }
})

function report(sides: Side[], pins: ReturnType<typeof pinning>, dropped: Map<string, number>, exports: number): void {
  const byName = new Map(sides.map((side) => [side.name, side]))
  const lines = [
    ...reportHead('bench:trace-cpu'),
    `gateways  ${sides[0]!.server.command}, a process a side, at ${gitDescription()}${BASELINE_TREE === null ? '' : `; the -before sides at ${gitDescription(resolve(BASELINE_TREE))}`}`,
    `load      GET ${PROXIED_PATH}, every side at once, each over ${CONNECTIONS} keep-alive connections at ${fmt(RATE)} requests a second; ${WARMUP_ROUNDS} × ${WARMUP} s to warm up, then ${ROUNDS} rounds of ${DURATION} s, each after ${LEAD} s unmeasured`,
    pins === null
      ? 'pinning   none (BENCH_PIN=1 puts the gateways on a CPU of their own)'
      : `pinning   the gateways on CPU ${pins.server}; the load, the sink and the upstream on CPU ${pins.rest}`,
    '',
    ...table(
      ['side', ...ROUND_COLUMNS, 'spans dropped'],
      sides.map((s) => [s.name, ...roundCells(medianOf(s.rounds)), fmt(dropped.get(s.name) ?? 0)]),
    ),
    `(medians over the rounds, requests their sum; CPU µs/req: the gateway's threads' run time over a round (/proc/<pid>/task/*/schedstat), per request answered; exports the sink took: ${fmt(exports)})`,
    '',
  ]
  for (const [onName, offName, target] of RATIOS) {
    const on = byName.get(onName)
    const off = byName.get(offName)
    if (on === undefined || off === undefined) continue
    const r = roundRatios(on.rounds, off.rounds)
    const verdict = target === null ? '' : ` (target ≤ ${target}: ${r.median <= target ? 'met' : 'NOT MET'})`
    const micros = medianOf(on.rounds).cpuMicros - medianOf(off.rounds).cpuMicros
    lines.push(
      `${`${onName} / ${offName}`.padEnd(26)} CPU/request median ${r.median.toFixed(3)} (quartiles ${r.q1.toFixed(3)} to ${r.q3.toFixed(3)}; ${micros >= 0 ? '+' : ''}${micros.toFixed(1)} µs)${verdict}`,
      `${''.padEnd(26)} rounds ${r.each.map((x) => x.toFixed(3)).join(', ')}`,
    )
  }
  console.log(lines.join('\n'))
}
