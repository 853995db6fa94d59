// The shared suite of the Redis topologies (helpers/redis-topology-suite.ts) on a cluster of three masters with a replica each.
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { orTimeout, until } from '../helpers/poll.js'
import { deploy, failoverUnderTraffic, sharedSuite } from '../helpers/redis-topology-suite.js'
import { RUN_TYPESCRIPT } from '../helpers/typescript.js'

const CLIENT_QUIT = fileURLToPath(new URL('../fixtures/cluster-client-quit.ts', import.meta.url))

const deployment = await deploy(t, 'cluster')
sharedSuite(t, deployment)
t.test('CLUSTER FAILOVER on a replica under traffic', (t) => failoverUnderTraffic(t, deployment, 'cluster-command'))
t.test('a master killed under traffic', (t) => failoverUnderTraffic(t, deployment, 'cluster-kill'))

t.test('a cluster client closed while it asks for the slots lets its process end', async (t) => {
  const { topology } = deployment
  const child = spawn(process.execPath, [...RUN_TYPESCRIPT, CLIENT_QUIT], {
    env: { ...process.env, ...topology.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  t.teardown(() => child.kill('SIGKILL'))
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk))
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  t.ok(await until(30_000, async () => stdout.includes('ready')), `the client is ready ${stderr.slice(-400)}`)
  for (const server of topology.servers.filter((s) => s.running() && !s.paused()))
    await topology.cli(server.port, 'client', 'pause', '3000', 'ALL')
  t.equal(await orTimeout(exit, 30_000, `still running 30 s later: ${stdout}${stderr.slice(-400)}`), 0)
  t.match(stdout, /closed while asking/, 'the client was closed while a refresh waited on the paused nodes')
})
