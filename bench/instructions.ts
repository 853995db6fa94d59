// Instructions per proxied request, counted by valgrind's callgrind: the gateway beside the bare
// proxy, and beside a baseline checkout (BENCH_BASELINE_TREE) for a same-run A/B. A count moves far
// less with the machine's load than CPU time does, but a gateway's grows with how long valgrind
// takes to serve the counted requests (its work per second, not per request, weighs a hundred
// times more at a hundredth of the speed): trust an A/B only when both sides took about as long
// (the seconds are printed), and leave the gateway/bare verdict to bench:proxy. bench/README.md.
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
  startBare,
  startGateway,
  startUpstream,
  stopChild,
} from './lib.js'

const WARMUP_REQUESTS = envInt('BENCH_WARMUP_REQUESTS', 20_000)
const REQUESTS = envInt('BENCH_REQUESTS', 5_000)
/** Rounds of the gateway and the baseline counted side by side, after one of the bare proxy. */
const ROUNDS = envInt('BENCH_ROUNDS', 1)
/** Fewer on a busy machine: each waits its turn in a loop a hundred times slower, and so do its store lookups. */
const CONNECTIONS = envInt('BENCH_CONNECTIONS', 50)
const BASELINE_TREE = process.env.BENCH_BASELINE_TREE || null

async function main(): Promise<void> {
  const callgrind = callgrindWrap(collectKnob())
  const { wrap, outDir } = callgrind
  const db = await createDatabase('bench')
  const started: Server[] = []
  try {
    const upstream = await startUpstream()
    started.push(upstream)
    const acting: Load = { headers: await seedOutsideValgrind(db.url, upstream.url) }
    console.error('starting the servers under valgrind (a minute or more)…')
    const timeoutMs = 600_000
    const [bare, gateway, baseline] = await Promise.all([
      startPatiently(() => startBare(upstream.url, { wrap, timeoutMs })),
      startPatiently(() => startGateway({ databaseUrl: db.url, upstreamUrl: upstream.url, wrap, timeoutMs })),
      BASELINE_TREE === null
        ? null
        : startPatiently(() =>
            startGateway({ databaseUrl: db.url, upstreamUrl: upstream.url, tree: BASELINE_TREE, wrap, timeoutMs }),
          ),
    ])
    started.push(bare, gateway, ...(baseline === null ? [] : [baseline]))
    console.error(`${fmt(WARMUP_REQUESTS)} requests to warm up, then ${fmt(REQUESTS)} counted, per side…`)
    const count = async (side: string, server: Server) => {
      const counted = await countRequests(server, acting, REQUESTS, CONNECTIONS, outDir)
      console.error(countedLine(side, counted))
      return counted
    }
    // Two at a time, one per core: three valgrinds on two cores slow the store lookups past their
    // deadlines. The gateway and the baseline go together, under the same conditions.
    await drive(bare.url, acting, WARMUP_REQUESTS, CONNECTIONS)
    const bareCount = await count('bare', bare)
    const pair = [['gateway', gateway], ...(baseline === null ? [] : [['baseline', baseline]])] as [string, Gateway][]
    await Promise.all(pair.map(([, server]) => drive(server.url, acting, WARMUP_REQUESTS, CONNECTIONS)))
    const rounds: Record<string, Counted[]> = { gateway: [], baseline: [] }
    for (let round = 1; round <= ROUNDS; round++) {
      const counted = await Promise.all(pair.map(([side, server]) => count(`${side} round ${round}`, server)))
      for (const [i, [side]] of pair.entries()) rounds[side]!.push(counted[i]!)
    }
    const perRequest = (side: string) => median(rounds[side]!.map((c) => c.perRequest))
    const lines = [
      ...reportHead('bench:instructions'),
      `valgrind  ${execFileSync('valgrind', ['--version'], { encoding: 'utf8' }).trim()} (callgrind), the load from this process and the upstream not under it`,
      collectLine(callgrind.collect),
      `load      GET ${PROXIED_PATH}, ${CONNECTIONS} keep-alive connections, ${fmt(WARMUP_REQUESTS)} requests uncounted, then ${fmt(REQUESTS)} counted${ROUNDS > 1 ? `, ${ROUNDS} rounds of the gateway${baseline === null ? '' : ' and the baseline side by side'}` : ''}`,
      ...(BASELINE_TREE === null ? [] : [`baseline  ${BASELINE_TREE} at ${gitDescription(BASELINE_TREE)}`]),
      '',
      `${'bare'.padEnd(9)} ${fmt(bareCount.perRequest).padStart(10)} instructions per request`,
      ...pair.map(
        ([side]) =>
          `${side.padEnd(9)} ${fmt(perRequest(side)).padStart(10)} instructions per request${ROUNDS > 1 ? ' (median)' : ''}`,
      ),
      `gateway / bare      ${(perRequest('gateway') / bareCount.perRequest).toFixed(3)}`,
    ]
    if (baseline !== null) {
      const ratios = rounds.gateway!.map((c, i) => c.perRequest / rounds.baseline![i]!.perRequest)
      lines.push(
        `gateway / baseline  ${median(ratios).toFixed(3)}${ROUNDS > 1 ? ` (median; rounds ${ratios.map((r) => r.toFixed(3)).join(', ')})` : ''}`,
        `seconds a round     gateway ${rounds.gateway!.map((c) => c.seconds.toFixed(0)).join(', ')}; baseline ${rounds.baseline!.map((c) => c.seconds.toFixed(0)).join(', ')}`,
      )
    }
    console.log(lines.join('\n'))
  } finally {
    for (const server of started.reverse()) await stopChild(server.child, 30_000)
    await db.drop()
    callgrind.remove()
  }
}

run(main)
