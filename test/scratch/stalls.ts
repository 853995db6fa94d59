import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { endWhenDone, serverStalls, startTopology } from '../helpers/redis-topologies.js'
endWhenDone(t, 'x')
t.test('stalls', async (t) => {
  const topology = await startTopology(t, 'sentinel')
  const s = serverStalls(topology)
  await sleep(300)
  t.comment(`idle lost ${s.lostMs()}`)
  topology.servers[0]!.pause()
  await sleep(400)
  t.comment(`while paused ${s.lostMs()}`)
  topology.servers[0]!.resume()
  await sleep(100)
  t.comment(`after ${s.lostMs()}`)
  s.stop()
})
