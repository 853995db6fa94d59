// The shared suite of the Redis topologies (helpers/redis-topology-suite.ts) on one redis-server.
import t from 'tap'
import { deploy, sharedSuite } from '../helpers/redis-topology-suite.js'

const deployment = await deploy(t, 'server')
sharedSuite(t, deployment)
