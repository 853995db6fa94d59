// Instructions per proxied request, counted by valgrind's callgrind, of the same build three ways
// (docs/operations.md, Traces; issue 84): `off`, no OTLP endpoint (tracing off); `0.01`, tracing with
// parentbased_traceidratio at 0.01; `always`, tracing every request (parentbased_always_on). The
// traced gateways export over OTLP/HTTP protobuf to a sink in this process. With
// BENCH_BASELINE_TREE, a fourth side: that checkout's gateway, untraced (`off` against the tree
// before tracing). Each round counts every side in turn, the order turned each round, so that a
// slow patch of the machine lands on all of them; ratios to `off` per round and their median.
// BENCH_BASELINE_TRACES=1 traces the baseline checkout too (`baseline-0.01`, `baseline-always`):
// each mode of this tree against the same mode of that one, in the same run.
// BENCH_COLLECT=io is the figure to trust: the batch processor exports from the span's end once a
// batch is full, inside the I/O poll, so the export's encoding is counted with the requests.
// BENCH_AA=<n> adds n more untraced gateways of this tree (`off-2`…), started last: an A/A that
// should read 1. BENCH_V8_FLAGS: V8's flags for every side. bench/README.md.
import { execFileSync } from 'node:child_process'
import {
  type Counted,
  callgrindWrap,
  collectKnob,
  collectLine,
  countedLine,
  countRequests,
  drive,
  type Load,
  seedOutsideValgrind,
  startPatiently,
} from './callgrind.js'
import {
  createDatabase,
  envInt,
  fmt,
  type Gateway,
  gitDescription,
  median,
  PROXIED_PATH,
  reportHead,
  run,
  type Server,
  startGateway,
  startUpstream,
  stopChild,
} from './lib.js'
import { type Sink, startSink } from './otlp-sink.js'

const WARMUP_REQUESTS = envInt('BENCH_WARMUP_REQUESTS', 3_000)
const REQUESTS = envInt('BENCH_REQUESTS', 2_000)
const ROUNDS = envInt('BENCH_ROUNDS', 3)
/** Few: each waits its turn in the gateway's loop, under valgrind a hundred times slower, and so do its store lookups. */
const CONNECTIONS = envInt('BENCH_CONNECTIONS', 8)
const BASELINE_TREE = process.env.BENCH_BASELINE_TREE || null
const BASELINE_TRACES = BASELINE_TREE !== null && envInt('BENCH_BASELINE_TRACES', 0, 0) > 0
/** Start the sides last first: whether a side's count follows its place in the start order (bench/README.md). */
const START_REVERSED = envInt('BENCH_START_REVERSED', 0, 0) > 0
/**
 * V8's flags for every side, space-separated (BENCH_V8_FLAGS; none by default): to try making the
 * JIT's state the same in every process (bench/README.md, what is left).
 */
const V8_FLAGS = (process.env.BENCH_V8_FLAGS ?? '').split(' ').filter((flag) => flag !== '')
/** Warm-up requests are sent to the sides in turn, this many at a time. */
const WARMUP_CHUNK = 500

/** A gateway's /metrics as series → value; under valgrind it may take many seconds to answer. */
async function scrapeSlowly(gateway: Gateway): Promise<Map<string, number>> {
  const response = await fetch(`http://127.0.0.1:${gateway.metricsPort}/metrics`, {
    signal: AbortSignal.timeout(120_000),
  })
  const series = new Map<string, number>()
  for (const line of (await response.text()).split('\n')) {
    const match = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/.exec(line)
    if (match !== null) series.set(match[1]! + (match[2] ?? ''), Number(match[3]))
  }
  return series
}

/** The tenancy cache's work a request over a counted span: by the second, so it grows as the side slows. */
function storeLine(before: Map<string, number>, after: Map<string, number>, requests: number): string {
  const per = (series: string) => (((after.get(series) ?? 0) - (before.get(series) ?? 0)) / requests).toFixed(3)
  return `    a request: ${per('tgw_cache_hits_total{tier="local"}')} in-process hits, ${per('tgw_store_lookups_total{tier="redis"}')} Redis and ${per('tgw_store_lookups_total{tier="postgres"}')} Postgres lookups, ${per('tgw_cache_refreshes_total')} refreshes, ${per('tgw_redis_errors_total')} Redis timeouts`
}

/** More untraced gateways of this tree beside `off` (`off-2`…): an A/A, which should read 1. */
const AA_SIDES = Array.from({ length: envInt('BENCH_AA', 0, 0) }, (_, i) => `off-${i + 2}` as const)
type Side = (typeof AA_SIDES)[number] | 'off' | '0.01' | 'always' | 'baseline' | 'baseline-0.01' | 'baseline-always'

run(async () => {
  const callgrind = callgrindWrap(collectKnob())
  const started: Server[] = []
  let sink: Sink | null = null
  const db = await createDatabase('trace_instructions')
  try {
    const upstream = await startUpstream()
    started.push(upstream)
    sink = await startSink()
    const headers = await seedOutsideValgrind(db.url, upstream.url)
    const load: Load = { headers }
    const tracing = (sampler: string) => ({
      OTEL_EXPORTER_OTLP_ENDPOINT: sink!.url,
      OTEL_TRACES_SAMPLER: sampler,
      OTEL_TRACES_SAMPLER_ARG: '0.01',
    })
    const envs: [Side, NodeJS.ProcessEnv, string | undefined][] = [
      ['off', {}, undefined],
      ['0.01', tracing('parentbased_traceidratio'), undefined],
      ['always', tracing('parentbased_always_on'), undefined],
      ...(BASELINE_TREE === null ? [] : [['baseline', {}, BASELINE_TREE] as [Side, NodeJS.ProcessEnv, string]]),
      ...(BASELINE_TRACES
        ? ([
            ['baseline-0.01', tracing('parentbased_traceidratio'), BASELINE_TREE],
            ['baseline-always', tracing('parentbased_always_on'), BASELINE_TREE],
          ] as [Side, NodeJS.ProcessEnv, string][])
        : []),
      // Last: started in reverse, the A/A's two sides are furthest apart.
      ...AA_SIDES.map((side): [Side, NodeJS.ProcessEnv, undefined] => [side, {}, undefined]),
    ]
    console.error('starting the gateways under valgrind, one at a time (minutes)…')
    const sides: [Side, Gateway][] = []
    for (const [side, env, tree] of START_REVERSED ? [...envs].reverse() : envs) {
      const gateway = await startPatiently(() =>
        startGateway({
          databaseUrl: db.url,
          upstreamUrl: upstream.url,
          tree,
          env,
          wrap: callgrind.wrap,
          nodeFlags: V8_FLAGS,
          timeoutMs: 600_000,
        }),
      )
      started.push(gateway)
      sides.push([side, gateway])
      // BENCH_KEEP_DUMPS names the dumps by process id.
      console.error(`${side}: process ${gateway.child.pid}`)
    }
    // Counted in the same turns either way.
    if (START_REVERSED) sides.reverse()
    console.error(`${fmt(WARMUP_REQUESTS)} requests a side to warm up, in turn…`)
    for (let sent = 0; sent < WARMUP_REQUESTS; sent += WARMUP_CHUNK)
      for (const [, server] of sides) await drive(server.url, load, WARMUP_CHUNK, CONNECTIONS)
    const rounds = new Map<Side, Counted[]>(sides.map(([side]) => [side, []]))
    for (let round = 0; round < ROUNDS; round++) {
      const turn = round % sides.length
      for (const [side, server] of [...sides.slice(turn), ...sides.slice(0, turn)]) {
        const before = await scrapeSlowly(server)
        const counted = await countRequests(server, load, REQUESTS, CONNECTIONS, callgrind.outDir)
        const after = await scrapeSlowly(server)
        rounds.get(side)!.push(counted)
        console.error(countedLine(`${side} round ${round + 1}`, counted))
        console.error(storeLine(before, after, counted.requests))
      }
    }
    const perRequest = (side: Side) => median(rounds.get(side)!.map((c) => c.perRequest))
    const ratios = (on: Side, off: Side) =>
      rounds.get(on)!.map((c, i) => c.perRequest / rounds.get(off)![i]!.perRequest)
    const line = (what: string, on: Side, off: Side, target?: number) => {
      const r = ratios(on, off)
      const m = median(r)
      const verdict = target === undefined ? '' : `target ≤ ${target}: ${m <= target ? 'met' : 'NOT MET'}; `
      return `${what.padEnd(28)} ${m.toFixed(3)} (${verdict}${fmt(perRequest(on) - perRequest(off))} instructions); rounds ${r.map((x) => x.toFixed(3)).join(', ')}`
    }
    console.log(
      [
        ...reportHead('bench:trace-instructions'),
        `valgrind  ${execFileSync('valgrind', ['--version'], { encoding: 'utf8' }).trim()} (callgrind), the load from this process, the upstream and the OTLP sink not under it`,
        collectLine(callgrind.collect),
        `load      GET ${PROXIED_PATH}, ${CONNECTIONS} keep-alive connections; ${fmt(WARMUP_REQUESTS)} requests a side uncounted, then ${ROUNDS} rounds of ${fmt(REQUESTS)} counted a side, the sides in turn`,
        'sides     off: no OTLP endpoint; 0.01: parentbased_traceidratio at 0.01; always: parentbased_always_on; OTLP/HTTP protobuf to a sink',
        ...(BASELINE_TREE === null ? [] : [`baseline  ${BASELINE_TREE} at ${gitDescription(BASELINE_TREE)}, untraced`]),
        '',
        ...sides.map(
          ([side]) =>
            `${side.padEnd(8)} ${fmt(perRequest(side)).padStart(10)} instructions per request (median); seconds a round ${rounds
              .get(side)!
              .map((c) => c.seconds.toFixed(0))
              .join(', ')}`,
        ),
        '',
        ...(BASELINE_TREE === null ? [] : [line('off / baseline', 'off', 'baseline', 1.01)]),
        ...AA_SIDES.map((side) => line(`${side} / off (an A/A)`, side, 'off')),
        line('0.01 / off', '0.01', 'off', 1.03),
        line('always / off', 'always', 'off', 1.2),
        ...(BASELINE_TRACES
          ? [
              line('baseline-0.01 / baseline', 'baseline-0.01', 'baseline', 1.03),
              line('baseline-always / baseline', 'baseline-always', 'baseline', 1.2),
              line('0.01 / baseline-0.01', '0.01', 'baseline-0.01'),
              line('always / baseline-always', 'always', 'baseline-always'),
            ]
          : []),
        `exports   the sink took ${fmt(sink.exports())}`,
      ].join('\n'),
    )
  } finally {
    for (const server of started.reverse()) await stopChild(server.child, 30_000)
    await sink?.close()
    await db.drop()
    callgrind.remove()
  }
})
