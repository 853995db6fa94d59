// The shared suite of the Redis topologies (helpers/redis-topology-suite.ts) on a cluster of three masters with a replica each.
import t from 'tap'
import { deploy, failoverUnderTraffic, sharedSuite } from '../helpers/redis-topology-suite.js'

const deployment = await deploy(t, 'cluster')
sharedSuite(t, deployment)
t.test('CLUSTER FAILOVER on a replica under traffic', (t) => failoverUnderTraffic(t, deployment, 'cluster-command'))
t.test('a master killed under traffic', (t) => failoverUnderTraffic(t, deployment, 'cluster-kill'))
