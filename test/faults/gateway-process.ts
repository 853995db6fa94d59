// The gateway in a process of its own, for test/faults/upstream.test.ts: run with
// `node --expose-gc --import scripts/typescript.mjs test/faults/gateway-process.ts` and an IPC channel. It builds the
// app as main.ts does (without Redis: the in-process cache only), listens on 127.0.0.1:0, and
// talks over IPC:
//   -> { type: 'listening', port }
//   <- { type: 'stats' }  -> { type: 'stats', heapUsed, rss, external, arrayBuffers,
//                               sockets: { clients, upstreams, other }, loopStalls }
//      (heapUsed after two full garbage collections; loopStalls: since the last stats, when the
//      event loop could not run for LOOP_STALL_MS or longer: test/helpers/loop-stalls.ts)
//   <- { type: 'fill-pool', connections }  -> { type: 'fill-pool' } once that many queries ran at once
//   <- { type: 'close' }  -> closes the app and the store, then exits 0
// Environment: DATABASE_URL, FAULT_ROUTES (the route table document, JSON), FAULT_ENV (more of the
// gateway's variables, a JSON object: usage periods, the request log, REDIS_URL and
// REDIS_KEY_PREFIX for a replica that shares a Redis), FAULT_TUNING (the app's timings, a JSON
// object of AppTuning's: a loaded machine's lease calls and waits, as test/helpers/limits.ts's).
import { Socket } from 'node:net'
import type { AddressInfo } from 'node:net'
import { buildApp } from '../../src/app.js'
import type { AppTuning } from '../../src/app-deps.js'
import { loadConfig } from '../../src/config.js'
import { HEAVY_READ_CONNECTIONS, LOOKUP_CONNECTIONS, openStore } from '../../src/store/db.js'
import { TEST_ENCRYPTION_KEY } from '../helpers/encryption-key.js'
import { recordLoopStalls } from '../helpers/loop-stalls.js'

const exposedGc = (globalThis as { gc?: () => void }).gc
if (exposedGc === undefined) throw new Error('run with --expose-gc')
const gc: () => void = exposedGc
if (process.send === undefined) throw new Error('run with an IPC channel')
const send = (message: unknown) => process.send!(message)

const databaseUrl = process.env.DATABASE_URL
const routesDoc = JSON.parse(process.env.FAULT_ROUTES ?? '{}') as Record<string, unknown>
// The route table is FAULT_ROUTES, never the repository's config/gateway.yaml.
const config = {
  ...loadConfig({
    DATABASE_URL: databaseUrl,
    MANAGEMENT_RATE: '1000000/1s',
    ENCRYPTION_KEY: TEST_ENCRYPTION_KEY,
    ...(JSON.parse(process.env.FAULT_ENV ?? '{}') as Record<string, string>),
  }),
  gatewayConfig: routesDoc,
}
const store = await openStore({ databaseUrl, dataDir: '.' })
const tuning = JSON.parse(process.env.FAULT_TUNING ?? '{}') as AppTuning
const app = await buildApp({ config, store, logger: false, tuning })
await app.listen({ port: 0, host: '127.0.0.1' })
const port = (app.server.address() as AddressInfo).port

const upstreamPorts = new Set(
  ((routesDoc.routes ?? []) as { upstream: string }[]).map((route) => Number(new URL(route.upstream).port)),
)

/** The process's open TCP sockets: accepted from clients, opened to upstreams, anything else. */
function sockets(): { clients: number; upstreams: number; other: number } {
  const handles = (process as unknown as { _getActiveHandles(): unknown[] })._getActiveHandles()
  const counts = { clients: 0, upstreams: 0, other: 0 }
  for (const handle of handles) {
    if (!(handle instanceof Socket) || handle.destroyed) continue
    if (handle.localPort === port) counts.clients++
    else if (handle.remotePort !== undefined && upstreamPorts.has(handle.remotePort)) counts.upstreams++
    else counts.other++
  }
  return counts
}

/** The shortest stall recorded: past the short timers (200 ms and up) the fault tests set. */
const LOOP_STALL_MS = 100
const loopStalls = recordLoopStalls(LOOP_STALL_MS)

process.on('message', (message: { type: string }) => {
  if (message.type === 'stats') {
    const stalls = loopStalls.take()
    gc()
    gc()
    const { heapUsed, rss, external, arrayBuffers } = process.memoryUsage()
    send({ type: 'stats', heapUsed, rss, external, arrayBuffers, sockets: sockets(), loopStalls: stalls })
  } else if (message.type === 'fill-pool') {
    // Every connection of the store's pools open at once (the main pool's `connections`, and the
    // lookups' and the heavy reads' all of theirs), so that none opens later: a baseline of their
    // sockets and their timers that the traffic after cannot grow (postgres.js keeps an idle
    // connection 60 s, longer than a test waits for rest).
    const { connections } = message as { type: string; connections: number }
    const fill = (sql: typeof store.sql | undefined, n: number) =>
      sql === undefined ? [] : Array.from({ length: n }, () => sql`select pg_sleep(0.05)`)
    void Promise.all([
      ...fill(store.sql, connections),
      ...fill(store.lookupSql, LOOKUP_CONNECTIONS),
      ...fill(store.heavyReadSql, HEAVY_READ_CONNECTIONS),
    ]).then(
      () => send({ type: 'fill-pool' }),
      (error: Error) => send({ type: 'fill-pool', error: error.message }),
    )
  } else if (message.type === 'close') {
    void (async () => {
      await app.close()
      await store.close()
      process.disconnect?.()
      process.exit(0)
    })()
  }
})

// The test process is gone (killed without its teardown): so is this one.
process.on('disconnect', () => process.exit(1))

send({ type: 'listening', port })
