// Instructions per proxied request, counted by valgrind's callgrind, of three routes of one gateway
// (docs/configuration.md, routes: `targets`, `retries`): `/three`, three targets (least_request) on
// three upstreams; `/one`, one upstream, the default retries; `/none`, one upstream with
// `retries: { attempts: 0 }`, no retry layer on its path. Each round counts the three in turn (the
// order turned each round) in the same process, so that what the process does per second weighs
// about as much on each; the ratios three/one (what balancing costs) and one/none (what the
// default retry layer costs) per round and their median. bench/README.md.
import { execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
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
  median,
  PROXIED_PATH,
  reportHead,
  run,
  type Server,
  startGateway,
  startUpstream,
  stopChild,
} from './lib.js'

const WARMUP_REQUESTS = envInt('BENCH_WARMUP_REQUESTS', 2_000)
const REQUESTS = envInt('BENCH_REQUESTS', 1_000)
const ROUNDS = envInt('BENCH_ROUNDS', 6)
/** Few: each waits its turn in the gateway's loop, under valgrind a hundred times slower, and so do its store lookups. */
const CONNECTIONS = envInt('BENCH_CONNECTIONS', 8)
/** Warm-up requests are sent to the routes in turn, this many at a time. */
const WARMUP_CHUNK = 500

const ROUTES = ['none', 'one', 'three'] as const
type Route = (typeof ROUTES)[number]

run(async () => {
  const callgrind = callgrindWrap(collectKnob())
  const started: Server[] = []
  const db = await createDatabase('upstream_instructions')
  const configDir = mkdtempSync(join(tmpdir(), 'tgw-bench-upstream-instructions-'))
  try {
    const upstreams = await Promise.all(Array.from({ length: 5 }, () => startUpstream()))
    started.push(...upstreams)
    const [none, one, ...three] = upstreams as [Server, Server, Server, Server, Server]
    const config = join(configDir, 'gateway.yaml')
    writeFileSync(
      config,
      [
        'routes:',
        `  - { prefix: /none, upstream: ${none.url}, retries: { attempts: 0 } }`,
        `  - { prefix: /one, upstream: ${one.url} }`,
        `  - { prefix: /three, targets: [${three.map((u) => `{ url: ${u.url} }`).join(', ')}] }`,
        '',
      ].join('\n'),
    )
    const headers = await seedOutsideValgrind(db.url, one.url)
    console.error('starting the gateway under valgrind (a minute or more)…')
    const gateway = await startPatiently(() =>
      startGateway({
        databaseUrl: db.url,
        upstreamUrl: one.url,
        wrap: callgrind.wrap,
        timeoutMs: 600_000,
        env: { GATEWAY_CONFIG: config },
      }),
    )
    started.push(gateway)
    const loads = Object.fromEntries(
      ROUTES.map((route) => [route, { headers, path: `/${route}${PROXIED_PATH}` }]),
    ) as Record<Route, Load>
    console.error(`${fmt(WARMUP_REQUESTS)} requests a route to warm up, in turn…`)
    for (let sent = 0; sent < WARMUP_REQUESTS; sent += WARMUP_CHUNK)
      for (const route of ROUTES) await drive(gateway.url, loads[route], WARMUP_CHUNK, CONNECTIONS)
    const rounds: Record<Route, Counted[]> = { none: [], one: [], three: [] }
    for (let round = 0; round < ROUNDS; round++) {
      const order = [...ROUTES.slice(round % 3), ...ROUTES.slice(0, round % 3)]
      for (const route of order) {
        const counted = await countRequests(gateway, loads[route], REQUESTS, CONNECTIONS, callgrind.outDir)
        rounds[route].push(counted)
        console.error(countedLine(`${route} round ${round + 1}`, counted))
      }
    }
    const ratios = (on: Route, off: Route) => rounds[on].map((c, i) => c.perRequest / rounds[off][i]!.perRequest)
    const line = (what: string, r: number[]) =>
      `${what}  median ${median(r).toFixed(3)}; rounds ${r.map((x) => x.toFixed(3)).join(', ')}`
    console.log(
      [
        ...reportHead('bench:upstream-instructions'),
        `valgrind  ${execFileSync('valgrind', ['--version'], { encoding: 'utf8' }).trim()} (callgrind), the load from this process and the upstreams not under it`,
        collectLine(callgrind.collect),
        `load      GET /<route>${PROXIED_PATH}, ${CONNECTIONS} keep-alive connections; ${fmt(WARMUP_REQUESTS)} requests a route uncounted, then ${ROUNDS} rounds of ${fmt(REQUESTS)} counted a route, the routes in turn`,
        `routes    three: three targets (least_request); one: one upstream, default retries; none: one upstream, retries: { attempts: 0 }`,
        '',
        ...ROUTES.map(
          (route) =>
            `${route.padEnd(6)} ${fmt(median(rounds[route].map((c) => c.perRequest))).padStart(10)} instructions per request (median); seconds a round ${rounds[route].map((c) => c.seconds.toFixed(0)).join(', ')}`,
        ),
        '',
        line('three / one', ratios('three', 'one')),
        line('one / none ', ratios('one', 'none')),
      ].join('\n'),
    )
  } finally {
    for (const server of started.reverse()) await stopChild(server.child, 30_000)
    rmSync(configDir, { recursive: true, force: true })
    await db.drop()
    callgrind.remove()
  }
})
