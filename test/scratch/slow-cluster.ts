import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { twiceTheRate, type Deployment } from '../helpers/limits-steady.js'
import { agents } from '../helpers/gateway-load.js'
import { startReplicas } from '../helpers/gateway.js'
import { endWhenDone, startTopology } from '../helpers/redis-topologies.js'
import { startUpstream } from '../helpers/upstream.js'

endWhenDone(t, 'cluster')
const upstream = await startUpstream(t)
const STOP_MS = Number(process.env.STOP_MS ?? 150)
const EVERY_MS = Number(process.env.EVERY_MS ?? 400)
t.test('slow cluster', async (t) => {
  const topology = await startTopology(t, 'cluster')
  const replicas = await startReplicas(t, 3, {
    limitTimings: { callTimeoutMs: 2_000 },
    gatewayConfig: { routes: [{ prefix: '/v1/things', upstream: upstream.url }] },
    redis: { env: topology.env },
  })
  const d: Deployment = { replicas, pool: agents(t, 3) }
  let on = true
  const pauser = process.env.FAILOVER ? (async () => {
    await sleep(Number(process.env.FAILOVER))
    const [m] = await topology.masters()
    const server = topology.servers.find((s) => m!.endsWith(`:${s.port}`))!
    console.log('# pausing', m, await topology.masters())
    server.pause()
    await sleep(3000)
    server.resume()
    console.log('# resumed', await topology.masters())
  })() : (async () => {
    while (on) {
      await sleep(EVERY_MS - STOP_MS)
      for (const s of topology.servers) s.pause()
      await sleep(STOP_MS)
      for (const s of topology.servers) s.resume()
    }
  })()
  t.teardown(() => { on = false; void pauser })
  await twiceTheRate(t, d, 'slow')
})
