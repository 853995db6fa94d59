// A key revoked while the cluster master holding its cache entry is lost stays refused on every
// replica once refused (docs/internals.md, caches): three real cluster masters with a replica
// each, two gateways under steady reads of a parent key, the entry's master killed, the key revoked
// by the CLI before its replica is promoted. The CLI tries Redis once: its delete never reaches
// the promoted replica, which holds the entry as it was before the revoke. The gateways refuse the
// key once their entries are read again (from Postgres, the master being gone), and must not take
// the old entry back from the promoted replica. Once per master of the cluster, each on a key whose
// entry lives there. A third gateway reads the key before and not again until it has seen the new
// master: it never refused the key and never heard of the revoke, and must not take the old entry
// either (what Redis held before a change of master is read from Postgres again).
// cache-revoked-stays-revoked.test.ts forces the same promotion deterministically, 20 times, for a
// revoke through the API.
import { createHash } from 'node:crypto'
import t from 'tap'
import { cacheKeys } from '../../src/cache/index.js'
import { entryKey } from '../../src/cache/entry-names.js'
import { runCliHere } from '../helpers/cli.js'
import { TEST_ENCRYPTION_KEY } from '../helpers/encryption-key.js'
import { metricValue, type Parent, startReplicas, type TestGateway } from '../helpers/gateway.js'
import { sleep, until } from '../helpers/poll.js'
import { endWhenDone, nodeClient, serverAt, startCluster } from '../helpers/redis-topologies.js'
import { startUpstream } from '../helpers/upstream.js'

/** Short, so that the gateways refresh the key's entry often: found entries refresh after 600 ms. */
const LOCAL_TTL_MS = 1_500

endWhenDone(t, 'cluster')
const topology = await startCluster(t)
const upstream = await startUpstream(t)
const [busy, other, idle] = (await startReplicas(t, 3, {
  listen: false,
  redis: { env: topology.env },
  gatewayConfig: { routes: [{ prefix: '/v1/things', upstream: upstream.url }] },
  cacheTimings: { localTtlMs: LOCAL_TTL_MS },
})) as [TestGateway, TestGateway, TestGateway]
const replicas = [busy, other]
const first = busy
const prefix = first.redisKeyPrefix!

/**
 * The master serving `name`'s slot now (null while it is failing), and its replica (none once it
 * was promoted).
 */
async function nodesOf(name: string): Promise<{ master: number | null; replica: number | null }> {
  const any = topology.servers.find((s) => s.running())!
  const slot = Number(await topology.cli(any.port, 'cluster', 'keyslot', name))
  const lines = (await topology.cli(any.port, 'cluster', 'nodes')).split('\n').map((line) => line.split(' '))
  const master = lines.find(
    (f) =>
      f[2]!.includes('master') &&
      !f[2]!.includes('fail') &&
      f.slice(8).some((range) => {
        const [from, to] = range.split('-').map(Number)
        return slot >= from! && slot <= (to ?? from)!
      }),
  )
  if (master === undefined) return { master: null, replica: null }
  const replica = lines.find((f) => f[3] === master[0] && !f[2]!.includes('fail'))
  const port = (f: string[]) => Number(f[1]!.split('@')[0]!.split(':')[1])
  return { master: port(master), replica: replica === undefined ? null : port(replica) }
}

/** A parent key whose entry lives on a master with a replica that is not `taken`. */
async function keyOnAMaster(taken: Set<number>): Promise<Parent & { name: string }> {
  for (;;) {
    const parent = await first.createParent()
    const name = entryKey(prefix, cacheKeys.key(createHash('sha256').update(parent.apiKey).digest()))
    const nodes = await nodesOf(name)
    if (nodes.master !== null && nodes.replica !== null && !taken.has(nodes.master)) return { ...parent, name }
  }
}

const killed = new Set<number>()
for (let run = 1; run <= 3; run++) {
  t.test(`master ${run} of 3 killed: the key revoked meanwhile is never accepted again`, async (t) => {
    const key = await keyOnAMaster(killed)
    const path = `/v1/things/${run}`
    const { master, replica } = await nodesOf(key.name)
    const statuses: number[][] = [[], []]
    const read = async (i: number) => {
      const status = (await replicas[i]!.call(key.apiKey, { method: 'GET', url: path })).statusCode
      statuses[i]!.push(status)
      return status
    }
    // Both gateways hold the key, and the entry has reached the master's replica.
    const replicaClient = nodeClient(t, replica!)
    await replicaClient.readonly()
    t.ok(
      await until(10_000, async () => {
        await Promise.all([read(0), read(1)])
        return (await replicaClient.exists(key.name)) === 1
      }),
      "the key's entry is on the master's replica",
    )
    t.ok(
      statuses.every((answers) => answers.every((status) => status === 200)),
      'accepted before',
    )
    const idleRead = async () => (await idle.call(key.apiKey, { method: 'GET', url: path })).statusCode
    t.equal(await idleRead(), 200, 'the idle gateway accepts it before')
    const changesBefore = idle.app.tenancyCache.redisMasters!.changes

    // Steady reads on both gateways from here to the end.
    let stop = false
    const traffic = Promise.all(
      [0, 1].map(async (i) => {
        while (!stop) {
          await read(i)
          await sleep(20)
        }
      }),
    )
    killed.add(master!)
    await serverAt(topology, `127.0.0.1:${master}`).kill()
    const revoke = await runCliHere(['keys', 'revoke', '--account', key.id, '--key', key.keyId], {
      DATABASE_URL: first.database.url,
      ENCRYPTION_KEY: TEST_ENCRYPTION_KEY,
      REDIS_KEY_PREFIX: prefix,
      ...topology.env,
    })
    t.equal(revoke.code, 0, 'revoked while the master is lost')
    t.match(revoke.stderr, /could not tell the replicas at once/, 'the CLI could not delete the entry')

    // The replica promoted, both gateways on it, and a few refreshes of the key's entry after.
    t.ok(await until(20_000, async () => (await nodesOf(key.name)).master === replica), 'the replica was promoted')
    const refreshes = () => Promise.all(replicas.map((gw) => metricValue(gw.app, 'tgw_cache_refreshes_total')))
    const before = await refreshes()
    t.ok(
      await until(20_000, async () => (await refreshes()).every((count, i) => count >= before[i]! + 4)),
      'each gateway refreshed its entries four times since',
    )
    stop = true
    await traffic
    // The idle gateway's entry expired long ago: its next read goes to Redis, once it follows the
    // new master.
    t.ok(
      await until(10_000, async () => idle.app.tenancyCache.redisMasters!.changes > changesBefore),
      'the idle gateway saw the change of master',
    )
    const idleAnswers = [await idleRead(), await idleRead()]
    t.same(idleAnswers, [401, 401], 'the idle gateway refuses the key: it did not take the old entry')
    for (const i of [0, 1]) {
      const after = statuses[i]!.slice(statuses[i]!.indexOf(401))
      t.ok(statuses[i]!.includes(401), `gateway ${i} refused the key`)
      t.ok(
        after.every((status) => status === 401),
        `gateway ${i} never accepted it after refusing it (${after.length} answers: ${[...new Set(after)].join(', ')})`,
      )
    }
  })
}
