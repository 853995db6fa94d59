// WebSockets through the gateway (docs/api.md, WebSockets): echo messages per second and the
// latency of an echo, through the gateway, through a bare @fastify/http-proxy with
// `websocket: true`, through the floor (`ws` piping each socket to one of its own on the upstream),
// and to the upstream directly, in the same run, with 1 and 100 sockets (and through another
// checkout of the gateway: BENCH_BASELINE_TREE); and the latency of an upgrade against an ordinary
// proxied GET's. bench/README.md says what it prints.
import http from 'node:http'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import { resolve } from 'node:path'
import { performance } from 'node:perf_hooks'
import { WebSocket } from 'ws'
import {
  createDatabase,
  envInt,
  fmt,
  isInterrupted,
  median,
  ms,
  percentile,
  reportHead,
  request,
  run,
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
const ROUNDS = envInt('BENCH_ROUNDS', 3)
const MESSAGE_BYTES = envInt('BENCH_MESSAGE_BYTES', 64)
const UPGRADES = envInt('BENCH_UPGRADES', 300)
const SOCKET_COUNTS = [1, 100]
const PATH = '/v1/things/1'
const BASELINE_TREE = process.env.BENCH_BASELINE_TREE || null

type TargetName = 'direct' | 'floor' | 'bare' | 'gateway' | 'baseline'
interface Target {
  name: TargetName
  url: string
  headers: Record<string, string>
}
interface EchoRound {
  target: TargetName
  sockets: number
  messages: number
  perSecond: number
  p50: number
  p99: number
}

function open(target: Target): Promise<WebSocket> {
  return new Promise((done, fail) => {
    const ws = new WebSocket(`${target.url.replace(/^http/, 'ws')}${PATH}`, [], { headers: target.headers })
    ws.once('open', () => done(ws))
    ws.once('error', fail)
    ws.once('unexpected-response', (_req, res) => fail(new Error(`${target.name}: upgrade answered ${res.statusCode}`)))
  })
}

/** Opens `count` sockets, 25 at a time (one tenant's upgrades share its slots like any requests). */
async function openMany(target: Target, count: number): Promise<WebSocket[]> {
  const sockets: WebSocket[] = []
  while (sockets.length < count) {
    const batch = Math.min(25, count - sockets.length)
    sockets.push(...(await Promise.all(Array.from({ length: batch }, () => open(target)))))
  }
  return sockets
}

const closeAll = (sockets: WebSocket[]) =>
  Promise.all(
    sockets.map(
      (ws) =>
        new Promise<void>((done) => {
          ws.once('close', () => done())
          ws.close()
        }),
    ),
  )

/** `count` sockets, each sending a message as soon as its last one came back, for `seconds`. */
async function echoRound(target: Target, count: number, seconds: number): Promise<EchoRound> {
  const sockets = await openMany(target, count)
  const payload = 'x'.repeat(MESSAGE_BYTES)
  const latencies: number[] = []
  let running = true
  const finished = sockets.map(
    (ws) =>
      new Promise<void>((done) => {
        let sentAt = 0
        const send = () => {
          if (!running) return done()
          sentAt = performance.now()
          ws.send(payload)
        }
        ws.on('message', () => {
          latencies.push(performance.now() - sentAt)
          send()
        })
        send()
      }),
  )
  const started = performance.now()
  await sleep(seconds * 1000)
  running = false
  const elapsed = (performance.now() - started) / 1000
  const messages = latencies.length
  await Promise.all(finished)
  await closeAll(sockets)
  const sorted = Float64Array.from(latencies.slice(0, messages)).sort()
  return {
    target: target.name,
    sockets: count,
    messages,
    perSecond: messages / elapsed,
    p50: percentile(sorted, 0.5),
    p99: percentile(sorted, 0.99),
  }
}

/** Sequential upgrades (each closed before the next), and sequential GETs on one keep-alive socket: ms each. */
async function latencies(target: Target): Promise<{ upgrade: number[]; get: number[] }> {
  const upgrade: number[] = []
  for (let i = 0; i < UPGRADES && !isInterrupted(); i++) {
    const started = performance.now()
    const ws = await open(target)
    upgrade.push(performance.now() - started)
    await closeAll([ws])
  }
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  const get: number[] = []
  for (let i = 0; i < UPGRADES && !isInterrupted(); i++) {
    const answer = await request(agent, new URL(target.url), { method: 'GET', path: PATH, headers: target.headers })
    if (answer.status !== 200) throw new Error(`${target.name}: GET ${PATH} answered ${answer.status}`)
    get.push(answer.ms)
  }
  agent.destroy()
  return { upgrade, get }
}

async function main(): Promise<void> {
  const db = await createDatabase('websocket')
  const dir = mkdtempSync(resolve(os.tmpdir(), 'tgw-bench-websocket-'))
  const started: Server[] = []
  try {
    const upstream = await startUpstream({ websocket: true })
    started.push(upstream)
    const bare = await startBare(upstream.url, { websocket: true })
    started.push(bare)
    const floor = await startBare(upstream.url, { websocket: true }, 'floor')
    started.push(floor)
    // One route carries WebSockets; its shares let one tenant's 100 sockets upgrade 25 at a time.
    const routeTable = resolve(dir, 'gateway.yaml')
    writeFileSync(
      routeTable,
      `routes:\n  - { prefix: /v1, upstream: "${upstream.url}", websocket: true, max_websockets_per_tenant: 1000 }\n`,
    )
    const gateway = await startGateway({
      databaseUrl: db.url,
      upstreamUrl: upstream.url,
      env: { GATEWAY_CONFIG: routeTable },
    })
    started.push(gateway)
    // The same route table, database and key: a same-run A/B of the gateway against that checkout.
    const baseline =
      BASELINE_TREE === null
        ? null
        : await startGateway({
            databaseUrl: db.url,
            upstreamUrl: upstream.url,
            env: { GATEWAY_CONFIG: routeTable },
            tree: BASELINE_TREE,
          })
    if (baseline !== null) started.push(baseline)
    const acting = await seedActing(gateway, db.url)
    const targets: Target[] = [
      { name: 'direct', url: upstream.url, headers: {} },
      // The proxies get the gateway's headers and pass them on, as in bench:proxy.
      { name: 'floor', url: floor.url, headers: acting.headers },
      { name: 'bare', url: bare.url, headers: acting.headers },
      { name: 'gateway', url: gateway.url, headers: acting.headers },
      ...(baseline === null ? [] : [{ name: 'baseline' as const, url: baseline.url, headers: acting.headers }]),
    ]

    const lines = reportHead('bench:websocket')
    lines.push(
      `load      closed loop: each socket sends a ${MESSAGE_BYTES}-byte text message as soon as its echo came back; ` +
        `${ROUNDS} rounds of ${DURATION} s per target and socket count, the targets' order rotating; medians of the rounds`,
      '',
    )
    for (const target of targets) await echoRound(target, 10, 2) // warm-up
    const rounds: EchoRound[] = []
    for (let round = 0; round < ROUNDS && !isInterrupted(); round++) {
      for (const count of SOCKET_COUNTS) {
        for (let k = 0; k < targets.length; k++) {
          const target = targets[(round + k) % targets.length]!
          await sleep(300)
          const r = await echoRound(target, count, DURATION)
          rounds.push(r)
          console.error(
            `round ${round + 1} ${target.name.padEnd(7)} ${String(count).padStart(3)} sockets: ${fmt(r.perSecond)} msg/s, p50 ${ms(r.p50)} ms, p99 ${ms(r.p99)} ms`,
          )
        }
      }
    }
    const rows: string[][] = []
    for (const count of SOCKET_COUNTS) {
      const of = (name: TargetName) => rounds.filter((r) => r.target === name && r.sockets === count)
      const bareRate = median(of('bare').map((r) => r.perSecond))
      const floorRate = median(of('floor').map((r) => r.perSecond))
      for (const target of targets) {
        const mine = of(target.name)
        const rate = median(mine.map((r) => r.perSecond))
        rows.push([
          `${count}`,
          target.name,
          fmt(rate),
          (rate / bareRate).toFixed(2),
          (rate / floorRate).toFixed(2),
          ms(median(mine.map((r) => r.p50))),
          ms(median(mine.map((r) => r.p99))),
        ])
      }
    }
    lines.push(...table(['sockets', 'target', 'msg/s', 'vs bare', 'vs floor', 'p50 ms', 'p99 ms'], rows, 2), '')
    if (baseline !== null) {
      const rate = (name: TargetName, count: number) =>
        median(rounds.filter((r) => r.target === name && r.sockets === count).map((r) => r.perSecond))
      const ratios = SOCKET_COUNTS.map(
        (count) => `${count}: ${(rate('gateway', count) / rate('baseline', count)).toFixed(3)}`,
      )
      lines.push(`gateway/baseline msg/s (${BASELINE_TREE}), by sockets: ${ratios.join(', ')}`, '')
    }

    const measured = new Map<TargetName, { upgrade: number[]; get: number[] }>()
    for (const target of targets) measured.set(target.name, await latencies(target))
    const direct = measured.get('direct')!
    const latencyRows = targets.map((target) => {
      const m = measured.get(target.name)!
      return [
        target.name,
        ms(median(m.upgrade)),
        ms(percentile(Float64Array.from(m.upgrade).sort(), 0.99)),
        ms(median(m.upgrade) - median(direct.upgrade)),
        ms(median(m.get)),
        ms(median(m.get) - median(direct.get)),
      ]
    })
    lines.push(
      `upgrades  ${UPGRADES} sequential upgrades (open, then close) and ${UPGRADES} sequential GET ${PATH} on one keep-alive connection, per target`,
      ...table(
        ['target', 'upgrade p50 ms', 'upgrade p99 ms', 'added p50 ms', 'GET p50 ms', 'added p50 ms'],
        latencyRows,
      ),
    )
    const gw = measured.get('gateway')!
    const bareM = measured.get('bare')!
    const floorM = measured.get('floor')!
    lines.push(
      '',
      `the gateway's upgrade adds ${ms(median(gw.upgrade) - median(direct.upgrade))} ms to a direct one, an ordinary GET ${ms(median(gw.get) - median(direct.get))} ms ` +
        `(over bare: upgrade ${ms(median(gw.upgrade) - median(bareM.upgrade))} ms, GET ${ms(median(gw.get) - median(bareM.get))} ms; ` +
        `over the floor: upgrade ${ms(median(gw.upgrade) - median(floorM.upgrade))} ms, GET ${ms(median(gw.get) - median(floorM.get))} ms)`,
    )
    console.log(lines.join('\n'))
  } finally {
    for (const server of started.reverse()) await stopChild(server.child)
    rmSync(dir, { recursive: true, force: true })
    await db.drop()
  }
}

run(main)
