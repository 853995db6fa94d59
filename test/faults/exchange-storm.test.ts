// No request can stop a replica (docs/api.md, "Upstream failures"), under a storm: for about 30 s
// (and at most STORM_MAX_REQUESTS requests), clients send every combination of upstream fault ×
// body behaviour (test/helpers/faulty-exchanges.ts) on public and keyed routes, many at once,
// against a gateway in a process of its own. The process never exits, it answers /healthz and
// another tenant's request all along, and afterwards what keeps its event loop alive (timers,
// sockets: test/faults/active-resources.ts, loaded ahead of it) comes back to what it was before
// the storm: nothing an exchange started outlives it.
import { spawn, type ChildProcess } from 'node:child_process'
import { get } from 'node:http'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { freshDatabase } from '../helpers/db.js'
import {
  BODY_MODES,
  type BodyMode,
  type ClientOutcome,
  faultyClient,
  faultyRoutes,
  faultyUpstreams,
  judgeAnswer,
  UPSTREAM_FAULTS,
  type UpstreamFault,
} from '../helpers/faulty-exchanges.js'
import { createParent } from '../helpers/gateway.js'
import { recordLoopStalls, type Stall } from '../helpers/loop-stalls.js'
import { eventually } from '../helpers/poll.js'
import { startUpstream } from '../helpers/upstream.js'
import { RUN_TYPESCRIPT } from '../helpers/typescript.js'

const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url))
const BODY_IDLE_MS = 300
const TIMEOUT_MS = 700
/** The storm: this long, at most this many requests, this many clients at once. */
const STORM_MS = 30_000
const STORM_MAX_REQUESTS = 4_000
const CLIENTS_AT_ONCE = 40
/** A stall of this process's loop worth recording (as the gateway process records its own). */
const LOOP_STALL_MS = 100
/** How long a client waits for the gateway to close a connection: far past every timer. */
const CLOSE_LIMIT_MS = 10_000
/** store/db.ts: the gateway's Postgres pool. */
const STORE_POOL_MAX = 10
/** How long the process is given to come back to rest (undici's idle upstream sockets: 4 s). */
const SETTLE_LIMIT_MS = 30_000

const db = await freshDatabase(t)
const tenant = await createParent(db.sql, { name: 'sends the faulty requests' })
const other = await createParent(db.sql, { name: 'another tenant' })
const healthy = await startUpstream(t)
const urls = await faultyUpstreams(t, TIMEOUT_MS)
const routes = {
  routes: [
    { prefix: '/healthy', upstream: healthy.url },
    ...faultyRoutes(urls, { timeout_ms: TIMEOUT_MS, body_idle_timeout_ms: BODY_IDLE_MS }),
  ],
}

// ---------------------------------------------------------------------------------------------
// The gateway process

const child: ChildProcess = spawn(
  process.execPath,
  ['--expose-gc', ...RUN_TYPESCRIPT, '--import', './test/faults/active-resources.ts', 'test/faults/gateway-process.ts'],
  {
    cwd: REPO_ROOT,
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
    env: { ...process.env, DATABASE_URL: db.url, FAULT_ROUTES: JSON.stringify(routes) },
  },
)
let output = ''
child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk))
child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk))
let exit: string | null = null
const exited = new Promise<void>((resolve) =>
  child.once('exit', (code, signal) => {
    exit = `code ${code}, signal ${signal}`
    resolve()
  }),
)
t.teardown(async () => {
  if (exit !== null) return
  if (child.connected) child.send({ type: 'close' })
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000)
  await exited
  clearTimeout(timer)
})

const port = await new Promise<number>((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error(`the gateway process did not start: ${output}`)), 60_000)
  child.on('message', (message: { type: string; port?: number }) => {
    if (message.type !== 'listening') return
    clearTimeout(timer)
    resolve(message.port!)
  })
  child.once('exit', (code) => reject(new Error(`the gateway process exited (${code}): ${output}`)))
})

/** A GET on a connection of its own, closed after it: the probes leave no socket behind. */
function status(path: string, apiKey: string | null = null): Promise<number | string> {
  return new Promise((resolve) => {
    const request = get(
      {
        host: '127.0.0.1',
        port,
        path,
        agent: false,
        headers: { connection: 'close', ...(apiKey === null ? {} : { authorization: `Bearer ${apiKey}` }) },
      },
      (response) => {
        response.resume()
        response.once('end', () => resolve(response.statusCode!))
        response.once('error', (error) => resolve(error.message))
      },
    )
    request.once('error', (error) => resolve(`no answer: ${error.message}`))
  })
}

/** Asks the process over IPC; null once it is gone. */
function ask<T>(type: 'stats' | 'resources' | 'fill-pool', fields: Record<string, unknown> = {}): Promise<T | null> {
  if (exit !== null || !child.connected) return Promise.resolve(null)
  return new Promise((resolve) => {
    const listener = (message: T & { type: string }) => {
      if (message.type !== type) return
      child.off('message', listener)
      void exited.then(() => resolve(null))
      resolve(message)
    }
    child.on('message', listener)
    void exited.then(() => resolve(null))
    child.send({ type, ...fields })
  })
}

interface Rest {
  /** Its counts of active resources by kind (Timeout, TCPSocketWrap…). */
  counts: Record<string, number>
  /** Its sockets from clients and to upstreams (gateway-process.ts's count). */
  clients: number
  upstreams: number
}

async function rest(): Promise<Rest | null> {
  const stats = await ask<{ sockets: { clients: number; upstreams: number } }>('stats')
  const resources = await ask<{ counts: Record<string, number> }>('resources')
  if (stats === null || resources === null) return null
  return { counts: resources.counts, clients: stats.sockets.clients, upstreams: stats.sockets.upstreams }
}

/**
 * Until no client or upstream socket is open, and the counts are at most `baseline`'s (with no
 * baseline: the same twice in a row, nothing pending at once); the last look.
 */
async function atRest(baseline: Rest | null): Promise<{ took: number | null; last: Rest | null }> {
  let last: Rest | null = null
  let before: Rest | null = null
  const took = await eventually(
    SETTLE_LIMIT_MS,
    async () => {
      before = last
      last = await rest()
      if (last === null) return true
      if (last.clients !== 0 || last.upstreams !== 0) return false
      if (baseline !== null) return Object.entries(last.counts).every(([kind, n]) => n <= (baseline.counts[kind] ?? 0))
      return last.counts.Immediate === undefined && JSON.stringify(last.counts) === JSON.stringify(before?.counts)
    },
    250,
  )
  return { took, last }
}

// ---------------------------------------------------------------------------------------------
// The storm

const combinations = UPSTREAM_FAULTS.flatMap((fault) =>
  (['public', 'keyed'] as const).flatMap((route) => BODY_MODES.map((mode) => ({ fault, route, mode }))),
)

interface Answered {
  fault: UpstreamFault
  mode: BodyMode
  what: string
  outcome: ClientOutcome
}

interface Tally {
  sent: number
  answered: Answered[]
  leftOpen: string[]
}

/** One combination; its answer goes into `tally`, judged once the storm is over (`wrongAnswers`). */
async function one(
  combination: { fault: UpstreamFault; route: 'public' | 'keyed'; mode: BodyMode },
  tally: Tally,
): Promise<void> {
  const { fault, route, mode } = combination
  const what = `${route} ${fault} ${mode}`
  const outcome = await faultyClient(
    port,
    `/${route}/${fault}/${tally.sent}`,
    route === 'public' ? null : tenant.apiKey,
    mode,
    CLOSE_LIMIT_MS,
  )
  if (mode === 'aborts') return
  tally.answered.push({ fault, mode, what, outcome })
  if (!outcome.ended) tally.leftOpen.push(what)
}

/**
 * The answers that were not their combination's; `excused` counts the 408s that the body idle
 * timer gave rightly, after a client's gap or a stall of the gateway's or the upstreams' loop
 * during the exchange.
 */
function wrongAnswers(answered: Answered[], loopStalls: readonly Stall[]): { wrong: string[]; excused: number } {
  const wrong: string[] = []
  let excused = 0
  for (const { fault, mode, what, outcome } of answered) {
    const judged = judgeAnswer(fault, mode, outcome, { bodyIdleMs: BODY_IDLE_MS, timeoutMs: TIMEOUT_MS }, loopStalls)
    if (judged === 'excused') excused++
    if (judged !== 'wrong') continue
    const gap = Math.round(outcome.longestGapMs)
    wrong.push(`${what}: ${JSON.stringify(outcome.text.slice(0, 40))} (longest client gap ${gap} ms)`)
  }
  return { wrong, excused }
}

/** Runs combinations round and round, CLIENTS_AT_ONCE at a time, until `ms` or `max` requests. */
async function storm(ms: number, max: number): Promise<Tally> {
  const tally: Tally = { sent: 0, answered: [], leftOpen: [] }
  const end = Date.now() + ms
  await Promise.all(
    Array.from({ length: CLIENTS_AT_ONCE }, async () => {
      while (Date.now() < end && tally.sent < max && exit === null) {
        const combination = combinations[tally.sent++ % combinations.length]!
        await one(combination, tally)
      }
    }),
  )
  return tally
}

/** Probes /healthz and another tenant's request while `during` runs; the failures. */
async function probing<T>(during: Promise<T>): Promise<{ result: T; probes: number; failures: string[] }> {
  let done = false
  let probes = 0
  const failures: string[] = []
  const prober = (async () => {
    while (!done) {
      probes++
      const health = await status('/healthz')
      if (health !== 200) failures.push(`/healthz: ${health}`)
      const theirs = await status('/healthy/x', other.apiKey)
      if (theirs !== 200) failures.push(`another tenant: ${theirs}`)
      await new Promise((resolve) => setTimeout(resolve, 200))
    }
  })()
  const result = await during
  done = true
  await prober
  return { result, probes, failures }
}

t.test('a storm of faulty exchanges: the process stays up, serves, and comes back to rest', async (t) => {
  // Warm-up: one of each, so that code paths, the key cache and the store's pool are at their
  // working size before the baseline is taken.
  const warm: Tally = { sent: 0, answered: [], leftOpen: [] }
  await Promise.all(combinations.map((combination) => one(combination, warm)))
  // The store's pool at its largest: its connections (each with its timers) are the gateway's,
  // not an exchange's, and must not grow into the comparison during the storm.
  const listed = await Promise.all(
    Array.from({ length: 3 * STORE_POOL_MAX }, () => status('/v1/sub-accounts?limit=1', tenant.apiKey)),
  )
  // A call past its store deadline on a loaded machine is a 503: the pool is filled below anyway.
  t.ok(
    listed.includes(200) && listed.every((code) => code === 200 || code === 503),
    `the management API answered the pool warm-up (${[...new Set(listed)]})`,
  )
  // Those calls may not have needed every connection at once: the pool is filled for certain.
  const filled = await ask<{ error?: string }>('fill-pool', { connections: STORE_POOL_MAX })
  t.same(filled, { type: 'fill-pool' }, 'every connection of the store pool is open')
  const before = await atRest(null)
  t.not(before.last, null, `the process is up after the warm-up (${exit ?? 'running'})`)
  const baseline = before.last
  t.comment(`at rest before the storm: ${JSON.stringify(baseline)}`)

  // This process's loop too: the upstreams answer from it, and one held here past the body idle
  // timer makes the gateway's 408 the right answer to an upstream meant to answer early.
  const ownStalls = recordLoopStalls(LOOP_STALL_MS)
  t.teardown(() => ownStalls.stop())
  const started = Date.now()
  const { result: tally, probes, failures } = await probing(storm(STORM_MS, STORM_MAX_REQUESTS))
  t.comment(`${tally.sent} requests in ${Date.now() - started} ms, ${probes} probes`)

  t.equal(exit, null, `the process never exited${exit === null ? '' : ` (${exit}): ${output.slice(-2_000)}`}`)
  t.same(failures, [], 'it answered /healthz and another tenant all along')
  // The gateway's loop stalls since the last look at rest before the storm.
  const stalls = (await ask<{ loopStalls: Stall[] }>('stats'))?.loopStalls ?? []
  const upstreamStalls = ownStalls.take()
  const { wrong, excused } = wrongAnswers(tally.answered, [...stalls, ...upstreamStalls])
  const longest = (list: readonly Stall[]) => Math.max(0, ...list.map(([from, to]) => to - from))
  t.comment(
    `the gateway's loop stalled ${stalls.length} times (at most ${longest(stalls)} ms), the upstreams' ` +
      `${upstreamStalls.length} times (at most ${longest(upstreamStalls)} ms); ${excused} 408s excused`,
  )
  t.same(wrong.slice(0, 10), [], `each request got its combination's answer (${wrong.length} did not)`)
  t.same(
    tally.leftOpen.slice(0, 10),
    [],
    `the gateway closed every connection it did not read whole (${tally.leftOpen.length} left open)`,
  )

  const after = await atRest(baseline)
  t.not(
    after.took,
    null,
    `its timers and sockets came back to the baseline: before ${JSON.stringify(baseline)}, after ${JSON.stringify(after.last)}`,
  )
  t.not(after.last, null, 'and it is still up')
  t.comment(`at rest after the storm, in ${after.took} ms: ${JSON.stringify(after.last)}`)
})
