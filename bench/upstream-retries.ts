// Several targets and retries (docs/configuration.md, routes: `targets`, `retries`), measured in one
// gateway: (a) CPU per request of a route of three targets against a route of one, and of a route
// of one without retries (`attempts: 0`: what the retry layer costs), rounds taken in turn at a
// fixed rate; (b) a route of four targets under GETs and POSTs (no Idempotency-Key) for
// BENCH_FAULT_SECONDS while one target is killed and another hung (SIGSTOP), one slow all along:
// what the clients saw, by method, and what the gateway counted (retries, the budget, ejections),
// with the route's per_try_timeout_ms (BENCH_PER_TRY_MS, 0: without it).
// bench/README.md says what it prints and its knobs.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import {
  counts,
  createDatabase,
  envInt,
  fmt,
  load,
  type Measured,
  median,
  metric,
  reportHead,
  roundLine,
  run,
  scrape,
  type Server,
  seedActing,
  sleep,
  startGateway,
  startUpstream,
  stopChild,
  table,
} from './lib.js'

const RATE = envInt('BENCH_RATE', 2000)
const DURATION = envInt('BENCH_DURATION', 5)
const ROUNDS = envInt('BENCH_ROUNDS', 6)
const CONNECTIONS = envInt('BENCH_CONNECTIONS', 32)
const FAULT_SECONDS = envInt('BENCH_FAULT_SECONDS', 30)
const FAULT_RATE = envInt('BENCH_FAULT_RATE', 400)
/** The slow target's delay, and the fault route's timeout_ms. */
const SLOW_MS = 50
const FAULT_TIMEOUT_MS = 2000
/** The fault route's retries.per_try_timeout_ms; 0 leaves it out (each attempt may wait all of timeout_ms). */
const PER_TRY_MS = envInt('BENCH_PER_TRY_MS', 500)

interface AutocannonResult {
  errors: number
  timeouts: number
  requests: { total: number }
}
type Autocannon = (
  opts: Record<string, unknown>,
  cb: (err: Error | null, result: AutocannonResult) => void,
) => { stop(): void }

const ROUTES = ['none', 'one', 'three'] as const
type Route = (typeof ROUTES)[number]

/** (a): the rounds of each route in turn, the order turned each round; CPU µs per request. */
async function balancingCost(gateway: Server, headers: Record<string, string>): Promise<string[]> {
  const pid = gateway.child.pid
  const rounds: Record<Route, Measured[]> = { none: [], one: [], three: [] }
  const measure = (route: Route, seconds: number) =>
    load({
      url: gateway.url,
      path: `/${route}/v1/things/1`,
      headers,
      connections: CONNECTIONS,
      seconds,
      rate: RATE,
      pid,
    })
  for (const route of ROUTES) await measure(route, DURATION) // warm-up
  for (let round = 0; round < ROUNDS; round++) {
    const order = [...ROUTES.slice(round % 3), ...ROUTES.slice(0, round % 3)]
    for (const route of order) {
      const measured = await measure(route, DURATION)
      rounds[route].push(measured)
      console.error(roundLine(`${route} round ${round + 1}`, measured))
    }
  }
  const ratios = (on: Route, off: Route) => rounds[on].map((r, i) => r.cpuMicros / rounds[off][i]!.cpuMicros)
  const line = (what: string, r: number[]) =>
    `${what} per round: ${r.map((x) => x.toFixed(3)).join(', ')}; median ${median(r).toFixed(3)}`
  return [
    '',
    `(a) CPU per request: "three" a route of three targets (least_request), "one" a route of one, "none" a route of one with retries: { attempts: 0 }; ${ROUNDS} rounds of ${DURATION} s at ${fmt(RATE)} req/s, ${CONNECTIONS} connections:`,
    '',
    ...table(
      ['route', 'CPU µs/req (median)', 'p50 ms', 'p99 ms'],
      ROUTES.map((route) => [
        route,
        median(rounds[route].map((r) => r.cpuMicros)).toFixed(1),
        median(rounds[route].map((r) => r.p50)).toFixed(3),
        median(rounds[route].map((r) => r.p99)).toFixed(3),
      ]),
    ),
    '',
    line('three/one', ratios('three', 'one')),
    line('one/none', ratios('one', 'none')),
  ]
}

/** (b): GETs and POSTs for FAULT_SECONDS; one target killed at a third, another hung at two thirds. */
async function faults(gateway: Server, headers: Record<string, string>, targets: Record<string, Server>) {
  const seen: Record<string, Record<string, number>> = { GET: {}, POST: {} }
  const count = (method: string) => (status: number) => {
    seen[method]![status] = (seen[method]![status] ?? 0) + 1
  }
  const autocannon = createRequire(import.meta.url)('autocannon') as Autocannon
  const events: string[] = []
  const started = Date.now()
  const at = (what: string) => events.push(`${((Date.now() - started) / 1000).toFixed(1)} s: ${what}`)
  const timers = [
    setTimeout(
      () => {
        targets.killed!.child.kill('SIGKILL')
        at('target "killed" killed (SIGKILL)')
      },
      (FAULT_SECONDS * 1000) / 3,
    ),
    setTimeout(
      () => {
        targets.hung!.child.kill('SIGSTOP')
        at('target "hung" stopped (SIGSTOP)')
      },
      (FAULT_SECONDS * 2000) / 3,
    ),
  ]
  const result = await new Promise<AutocannonResult>((done, fail) => {
    autocannon(
      {
        url: gateway.url,
        connections: CONNECTIONS,
        duration: FAULT_SECONDS,
        overallRate: FAULT_RATE,
        timeout: 10,
        headers,
        requests: [
          { method: 'GET', path: '/fleet/v1/things/1', onResponse: count('GET') },
          {
            method: 'POST',
            path: '/fleet/v1/things/1',
            headers: { ...headers, 'content-type': 'application/json' },
            body: '{"n":1}',
            onResponse: count('POST'),
          },
        ],
      },
      (err, res) => (err ? fail(err) : done(res)),
    )
  })
  for (const timer of timers) clearTimeout(timer)
  targets.hung!.child.kill('SIGCONT')
  const scraped = await scrape((gateway as unknown as { metricsPort: number }).metricsPort)
  const reasons = ['connect_failure', 'reset', '502', '503', '504', 'per_try_timeout']
  return [
    '',
    `(b) route /fleet, four targets (least_request, timeout_ms ${FAULT_TIMEOUT_MS}, retries on every kind, 2 attempts, per_try_timeout_ms ${PER_TRY_MS === 0 ? 'none' : PER_TRY_MS}): "stable", "slow" (${SLOW_MS} ms each), "killed", "hung"; GET and POST (no Idempotency-Key) in turn for ${FAULT_SECONDS} s at ${fmt(FAULT_RATE)} req/s, ${CONNECTIONS} connections:`,
    '',
    ...events.map((e) => `- ${e}`),
    '',
    ...table(
      ['method', 'answers', 'statuses'],
      (['GET', 'POST'] as const).map((method) => [
        method,
        fmt(Object.values(seen[method]!).reduce((a, b) => a + b, 0)),
        counts(seen[method]!),
      ]),
    ),
    '',
    `client-side errors (sockets) ${result.errors}, timeouts ${result.timeouts}; retries ${reasons
      .map(
        (reason) =>
          `${reason} ${fmt(metric(scraped, 'tgw_upstream_retries_total', 'route="/fleet"', `reason="${reason}"`))}`,
      )
      .join(
        ', ',
      )}; budget refusals ${fmt(metric(scraped, 'tgw_upstream_retry_budget_exhausted_total', 'route="/fleet"'))}; ejections ${fmt(metric(scraped, 'tgw_upstream_ejections_total', 'route="/fleet"'))}`,
  ]
}

run(async () => {
  const started: Server[] = []
  const db = await createDatabase('upstream_retries')
  const configDir = mkdtempSync(join(tmpdir(), 'tgw-bench-retries-'))
  try {
    const none = await startUpstream()
    const one = await startUpstream()
    const three = [await startUpstream(), await startUpstream(), await startUpstream()]
    const fleet = {
      stable: await startUpstream(),
      slow: await startUpstream({ delayMs: SLOW_MS }),
      killed: await startUpstream(),
      hung: await startUpstream(),
    }
    started.push(none, one, ...three, ...Object.values(fleet))
    const config = join(configDir, 'gateway.yaml')
    writeFileSync(
      config,
      [
        'routes:',
        `  - { prefix: /none, upstream: ${none.url}, retries: { attempts: 0 } }`,
        `  - { prefix: /one, upstream: ${one.url} }`,
        `  - prefix: /three`,
        `    targets: [${three.map((u) => `{ url: ${u.url} }`).join(', ')}]`,
        `  - prefix: /fleet`,
        `    timeout_ms: ${FAULT_TIMEOUT_MS}`,
        `    targets: [${Object.values(fleet)
          .map((u) => `{ url: ${u.url} }`)
          .join(', ')}]`,
        `    retries: { attempts: 2, on: [connect_failure, reset, 502, 503, 504]${PER_TRY_MS === 0 ? '' : `, per_try_timeout_ms: ${PER_TRY_MS}`} }`,
        '',
      ].join('\n'),
    )
    const gateway = await startGateway({ databaseUrl: db.url, upstreamUrl: one.url, env: { GATEWAY_CONFIG: config } })
    started.push(gateway)
    const { headers } = await seedActing(gateway, db.url)
    const lines = [...reportHead('bench:upstream-retries')]
    lines.push(...(await balancingCost(gateway, headers)))
    await sleep(1000)
    lines.push(...(await faults(gateway, headers, fleet)))
    console.log(lines.join('\n'))
  } finally {
    for (const server of started.reverse()) await stopChild(server.child)
    rmSync(configDir, { recursive: true, force: true })
    await db.drop()
  }
})
