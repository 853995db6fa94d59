// The gateway in a process of its own, for test/faults/upstream.test.ts: run with
// `node --expose-gc --import tsx test/faults/gateway-process.ts` and an IPC channel. It builds the
// app as main.ts does (without Redis: the in-process cache only), listens on 127.0.0.1:0, and
// talks over IPC:
//   -> { type: 'listening', port }
//   <- { type: 'stats' }  -> { type: 'stats', heapUsed, rss, external, arrayBuffers,
//                               sockets: { clients, upstreams, other }, loopStallMs }
//      (heapUsed after two full garbage collections; loopStallMs: the event loop's longest
//      delay since the last stats, which on a loaded machine can outlast a test's short timers)
//   <- { type: 'close' }  -> closes the app and the store, then exits 0
// Environment: DATABASE_URL, FAULT_ROUTES (the route table document, JSON), FAULT_ENV (more of the
// gateway's variables, a JSON object: usage periods, the request log).
import { Socket } from 'node:net'
import type { AddressInfo } from 'node:net'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { buildApp } from '../../src/app.js'
import { loadConfig } from '../../src/config.js'
import { openStore } from '../../src/store/db.js'
import { TEST_ENCRYPTION_KEY } from '../helpers/encryption-key.js'

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
const app = await buildApp({ config, store, logger: false })
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

const loopDelay = monitorEventLoopDelay({ resolution: 10 })
loopDelay.enable()

process.on('message', (message: { type: string }) => {
  if (message.type === 'stats') {
    const loopStallMs = loopDelay.max / 1e6
    loopDelay.reset()
    gc()
    gc()
    const { heapUsed, rss, external, arrayBuffers } = process.memoryUsage()
    send({ type: 'stats', heapUsed, rss, external, arrayBuffers, sockets: sockets(), loopStallMs })
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
