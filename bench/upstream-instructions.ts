// Instructions per proxied request, counted by valgrind's callgrind, of three routes of one gateway
// (docs/configuration.md, routes: `targets`, `retries`): `/three`, three targets (least_request) on
// three upstreams; `/one`, one upstream, the default retries; `/none`, one upstream with
// `retries: { attempts: 0 }`, no retry layer on its path. Each round counts the three in turn (the
// order turned each round) in the same process, so that what the process does per second weighs
// about as much on each; the ratios three/one (what balancing costs) and one/none (what the
// default retry layer costs) per round and their median. bench/README.md.
import {
  countInTurn,
  inTurnBench,
  type Load,
  medianLine,
  ratioLine,
  seedOutsideValgrind,
  valgrindHead,
} from './callgrind.js'
import { envInt, fmt, PROXIED_PATH, run, type Server, startUpstream } from './lib.js'

const WARMUP_REQUESTS = envInt('BENCH_WARMUP_REQUESTS', 2_000)
const REQUESTS = envInt('BENCH_REQUESTS', 1_000)
const ROUNDS = envInt('BENCH_ROUNDS', 6)
/** Few: each waits its turn in the gateway's loop, under valgrind a hundred times slower, and so do its store lookups. */
const CONNECTIONS = envInt('BENCH_CONNECTIONS', 8)

const ROUTES = ['none', 'one', 'three'] as const
type Route = (typeof ROUTES)[number]

run(() =>
  inTurnBench('upstream_instructions', async ({ callgrind, databaseUrl, started, config, startCounted }) => {
    const upstreams = await Promise.all(Array.from({ length: 5 }, () => startUpstream()))
    started.push(...upstreams)
    const [none, one, ...three] = upstreams as [Server, Server, Server, Server, Server]
    const env = config(
      [
        'routes:',
        `  - { prefix: /none, upstream: ${none.url}, retries: { attempts: 0 } }`,
        `  - { prefix: /one, upstream: ${one.url} }`,
        `  - { prefix: /three, targets: [${three.map((u) => `{ url: ${u.url} }`).join(', ')}] }`,
        '',
      ].join('\n'),
    )
    const headers = await seedOutsideValgrind(databaseUrl, one.url)
    const gateway = await startCounted(one.url, env)
    const loads = Object.fromEntries(
      ROUTES.map((route) => [route, { headers, path: `/${route}${PROXIED_PATH}` }]),
    ) as Record<Route, Load>
    const rounds = await countInTurn(gateway, loads, {
      warmup: WARMUP_REQUESTS,
      requests: REQUESTS,
      rounds: ROUNDS,
      connections: CONNECTIONS,
      outDir: callgrind.outDir,
    })
    console.log(
      [
        ...valgrindHead('bench:upstream-instructions', callgrind.collect),
        `load      GET /<route>${PROXIED_PATH}, ${CONNECTIONS} keep-alive connections; ${fmt(WARMUP_REQUESTS)} requests a route uncounted, then ${ROUNDS} rounds of ${fmt(REQUESTS)} counted a route, the routes in turn`,
        `routes    three: three targets (least_request); one: one upstream, default retries; none: one upstream, retries: { attempts: 0 }`,
        '',
        ...ROUTES.map((route) => medianLine(route, rounds[route])),
        '',
        ratioLine('three / one', rounds.three, rounds.one),
        ratioLine('one / none ', rounds.one, rounds.none),
      ].join('\n'),
    )
  }),
)
