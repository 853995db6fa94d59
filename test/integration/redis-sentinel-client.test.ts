// The gateway's Sentinel client (cache/redis-topology.ts, openRedis) against a real master, replica
// and three sentinels: a connection is followed again after its connect was cut while a sentinel
// was asked for the master (what ioredis's failover detector does on +switch-master), and a
// sentinel that takes the connection but answers nothing holds no reconnection.
import t, { type Test } from 'tap'
import { connectCommandClient } from '../../src/cache/redis-commands.js'
import type { Redis } from 'ioredis'
import type { RedisClient } from '../../src/cache/redis-topology.js'
import { until } from '../helpers/poll.js'
import { SENTINEL_NAME, startSentinel, type Topology } from '../helpers/redis-topologies.js'

const topology = await startSentinel(t)

/** A commands client, as the gateway opens it, on this deployment; ready. */
async function openClient(t: Test): Promise<RedisClient> {
  const redis = connectCommandClient(
    {
      topology: 'sentinel',
      sentinels: topology.sentinels.map((s) => ({ host: '127.0.0.1', port: s.port })),
      name: SENTINEL_NAME,
      credentials: {},
    },
    { failed: () => {}, down: () => {}, ready: () => {} },
  )
  t.teardown(() => redis.disconnect())
  if (!(await until(10_000, async () => redis.status === 'ready'))) throw new Error(`not ready: ${redis.status}`)
  return redis
}

/**
 * The first sentinel (the one asked first) hangs, and the master closes the client's connection:
 * the client is then connecting, waiting on that sentinel.
 */
async function reconnectingOnAHungSentinel(t: Test, topology: Topology, redis: RedisClient): Promise<void> {
  const id = await (redis as Redis).client('ID')
  t.teardown(() => topology.sentinels[0]!.resume())
  topology.sentinels[0]!.pause()
  const [master] = await topology.masters()
  // This client's connection only: the sentinels' own links to the master stay up (no failover).
  await topology.cli(Number(master!.split(':')[1]), 'client', 'kill', 'id', String(id))
  if (!(await until(5_000, async () => redis.status === 'connecting', 5)))
    throw new Error(`not reconnecting: ${redis.status}`)
}

t.test('a connect cut while a sentinel is asked: the client connects again', async (t) => {
  const redis = await openClient(t)
  await reconnectingOnAHungSentinel(t, topology, redis)
  // What the failover detector does on +switch-master: the connection ended, the client not closed.
  redis.disconnect(true)
  topology.sentinels[0]!.resume()
  t.ok(await until(5_000, async () => redis.status === 'ready'), `ready again (${redis.status})`)
  // Polled: a command has 50 ms, which a machine running three test files can miss.
  t.ok(await until(2_000, async () => (await redis.ping().catch(() => null)) === 'PONG'), 'and answering')
})

// The app's close while the client waits on the hung sentinel, or between the cut connect's error
// and its end (which only ioredis's own flag tells).
for (const [when, close] of [
  ['while a sentinel is asked', (redis: RedisClient) => redis.disconnect()],
  ['as its cut connect fails', (redis: RedisClient) => redis.once('error', () => redis.disconnect()).disconnect(true)],
] as const)
  t.test(`a client closed ${when} stays closed`, async (t) => {
    const redis = await openClient(t)
    await reconnectingOnAHungSentinel(t, topology, redis)
    close(redis)
    topology.sentinels[0]!.resume()
    t.notOk(await until(3_000, async () => redis.status === 'ready'), 'not connected again')
    t.equal(redis.status, 'end', 'ended')
  })

t.test('a sentinel that answers nothing: the next is asked, while it still hangs', async (t) => {
  const redis = await openClient(t)
  await reconnectingOnAHungSentinel(t, topology, redis)
  t.ok(await until(5_000, async () => redis.status === 'ready'), `ready again (${redis.status})`)
  t.ok(topology.sentinels[0]!.paused(), 'the first sentinel hangs still')
})
