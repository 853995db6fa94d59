// Instructions per proxied request, counted by valgrind's callgrind: the gateway beside the bare
// proxy, and beside a baseline checkout (BENCH_BASELINE_TREE) for a same-run A/B. A count moves far
// less with the machine's load than CPU time does, but a gateway's grows with how long valgrind
// takes to serve the counted requests (its work per second, not per request, weighs a hundred
// times more at a hundredth of the speed): trust an A/B only when both sides took about as long
// (the seconds are printed), and leave the gateway/bare verdict to bench:proxy. bench/README.md.
import { execFile, execFileSync } from 'node:child_process'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import { resolve } from 'node:path'
import {
  createDatabase,
  envInt,
  fmt,
  type Gateway,
  gitDescription,
  isInterrupted,
  PROXIED_PATH,
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
  UPSTREAM_BODY,
} from './lib.js'

const WARMUP_REQUESTS = envInt('BENCH_WARMUP_REQUESTS', 20_000)
const REQUESTS = envInt('BENCH_REQUESTS', 5_000)
const CONNECTIONS = 50
const BASELINE_TREE = process.env.BENCH_BASELINE_TREE || null
// valgrind names its vgdb pipes after $HOST, which callgrind_control must share with the servers.
process.env.HOST = '127.0.0.1'

/**
 * `count` GETs over `connections` keep-alive connections. Under valgrind a store lookup (an entry's
 * TTL ran out) can miss its deadline: a 503 store_unavailable is sent again after a pause, and
 * counted (it ran in the counted span too). Anything else but the upstream's 200 fails the bench.
 */
async function drive(
  url: string,
  headers: Record<string, string>,
  count: number,
  connections = CONNECTIONS,
): Promise<number> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: connections })
  let [left, resent] = [count, 0]
  const worker = async () => {
    while (left-- > 0) {
      for (;;) {
        if (isInterrupted()) throw new Error('interrupted')
        const a = await request(agent, new URL(url), { method: 'GET', path: PROXIED_PATH, headers }, 600_000)
        if (a.status === 200 && a.body === UPSTREAM_BODY) break
        if (a.status !== 503 || !a.body.includes('store_unavailable'))
          throw new Error(`${a.status}: ${a.body.slice(0, 300)}`)
        if (++resent > 50) throw new Error('more than 50 answers 503 store_unavailable: is the store up?')
        await sleep(100)
      }
    }
  }
  await Promise.all(Array.from({ length: connections }, worker)).finally(() => agent.destroy())
  return resent
}

/**
 * A callgrind_control command to a running server. valgrind reads it only while the server runs
 * code, so single requests trickle in until it is answered; returns how many did.
 */
async function callgrind(
  command: '--zero' | '--dump',
  server: Server,
  headers: Record<string, string>,
): Promise<number> {
  for (let attempt = 1; ; attempt++) {
    let answer: { out: string; err: Error | null } | null = null
    execFile('callgrind_control', [command, String(server.child.pid)], { timeout: 120_000 }, (err, out) => {
      answer = { out, err }
    })
    let trickled = 0
    while (answer === null) {
      trickled += 1 + (await drive(server.url, headers, 1, 1))
      await sleep(20)
    }
    const { out, err } = answer as { out: string; err: Error | null }
    if (err !== null) throw err
    // OK once vgdb passed the command on; it finds the process through vgdb's files, and now and then misses it.
    if (/OK\./.test(out)) return trickled
    if (!/not detected/.test(out) || attempt === 5) throw new Error(`callgrind_control ${command}: ${out}`)
  }
}

async function measure(side: string, server: Server, headers: Record<string, string>, outDir: string): Promise<number> {
  const started = Date.now()
  await drive(server.url, headers, WARMUP_REQUESTS)
  await callgrind('--zero', server, headers)
  const resent = await drive(server.url, headers, REQUESTS)
  // The requests that waited for the dump ran in the counted span, and so did the resent ones.
  const requests = REQUESTS + resent + (await callgrind('--dump', server, headers))
  for (let i = 0; i < 600; i++) {
    const name = readdirSync(outDir).find((entry) => entry.startsWith(`callgrind.out.${server.child.pid}.`))
    // The trailing newline tells a whole number from one still being written.
    const summary = name === undefined ? null : /^summary: (\d+)\n/m.exec(readFileSync(resolve(outDir, name), 'utf8'))
    if (summary != null) {
      const perRequest = Number(summary[1]) / requests
      console.error(
        `  ${side}: ${fmt(perRequest)} instructions per request (${fmt(requests)} requests, ${fmt(resent)} resent, ${((Date.now() - started) / 1000).toFixed(0)} s)`,
      )
      return perRequest
    }
    await sleep(100)
  }
  throw new Error(`no callgrind dump of ${side}`)
}

async function main(): Promise<void> {
  const outDir = mkdtempSync(resolve(os.tmpdir(), 'tgw-callgrind-'))
  // V8 writes and rewrites machine code at run time.
  const wrap = [
    'valgrind',
    '--tool=callgrind',
    '--smc-check=all-non-file',
    `--callgrind-out-file=${outDir}/callgrind.out.%p`,
    `--log-file=${outDir}/valgrind.%p.log`,
  ]
  const db = await createDatabase('bench')
  const started: Server[] = []
  try {
    const upstream = await startUpstream()
    started.push(upstream)
    console.error('starting the servers under valgrind (a minute or more)…')
    const timeoutMs = 600_000
    const [bare, gateway, baseline] = await Promise.all([
      startBare(upstream.url, { wrap, timeoutMs }),
      startGateway({ databaseUrl: db.url, upstreamUrl: upstream.url, wrap, timeoutMs }),
      BASELINE_TREE === null
        ? null
        : startGateway({ databaseUrl: db.url, upstreamUrl: upstream.url, tree: BASELINE_TREE, wrap, timeoutMs }),
    ])
    started.push(bare, gateway, ...(baseline === null ? [] : [baseline]))
    const { headers } = await seedActing(gateway, db.url)
    console.error(`${fmt(WARMUP_REQUESTS)} requests to warm up, then ${fmt(REQUESTS)} counted, per side…`)
    // Two at a time, one per core: three valgrinds on two cores slow the store lookups past their
    // deadlines. The gateway and the baseline go together, under the same conditions.
    const perRequest: Record<string, number> = { bare: await measure('bare', bare, headers, outDir) }
    const pair = [['gateway', gateway], ...(baseline === null ? [] : [['baseline', baseline]])] as [string, Gateway][]
    const counted = await Promise.all(pair.map(([side, server]) => measure(side, server, headers, outDir)))
    for (const [i, [side]] of pair.entries()) perRequest[side] = counted[i]!
    const lines = [
      ...reportHead('bench:instructions'),
      `valgrind  ${execFileSync('valgrind', ['--version'], { encoding: 'utf8' }).trim()} (callgrind), the load from this process and the upstream not under it`,
      `load      GET ${PROXIED_PATH}, ${CONNECTIONS} keep-alive connections, ${fmt(WARMUP_REQUESTS)} requests uncounted, then ${fmt(REQUESTS)} counted`,
      ...(BASELINE_TREE === null ? [] : [`baseline  ${BASELINE_TREE} at ${gitDescription(BASELINE_TREE)}`]),
      '',
      ...Object.entries(perRequest).map(
        ([side, n]) => `${side.padEnd(9)} ${fmt(n).padStart(10)} instructions per request`,
      ),
      `gateway / bare      ${(perRequest.gateway! / perRequest.bare!).toFixed(3)}`,
    ]
    if (perRequest.baseline !== undefined)
      lines.push(`gateway / baseline  ${(perRequest.gateway! / perRequest.baseline).toFixed(3)}`)
    console.log(lines.join('\n'))
  } finally {
    for (const server of started.reverse()) await stopChild(server.child, 30_000)
    await db.drop()
    rmSync(outDir, { recursive: true, force: true })
  }
}

run(main)
