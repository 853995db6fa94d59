// The shared suite of the Redis topologies (helpers/redis-topology-suite.ts) on Sentinel: one master, one replica, three sentinels.
import t from 'tap'
import { deploy, failoverUnderTraffic, sharedSuite } from '../helpers/redis-topology-suite.js'

const deployment = await deploy(t, 'sentinel')
sharedSuite(t, deployment)
t.test('SENTINEL FAILOVER under traffic', (t) => failoverUnderTraffic(t, deployment, 'sentinel-command'))
t.test('the master killed under traffic', (t) => failoverUnderTraffic(t, deployment, 'sentinel-kill'))
// A deployment of its own: the one above has lost a data node, and has no replica left to promote.
t.test('the master killed under traffic, the first sentinel hung', async (t) =>
  failoverUnderTraffic(t, await deploy(t, 'sentinel'), 'sentinel-kill-hung'),
)
