// The bootstrap key of an embedded database is printed once, so a start that fails must not spend
// it (src/main.ts; docs/decisions/0249-the-bootstrap-account-is-made-once-the-gateway.md): with
// PORT or METRICS_PORT taken on the first start, no account is created and no key printed; the next
// start that binds both prints one, and that key works.
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer, type Server } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { BOOTSTRAP_LINE, startEmbeddedGateway } from '../helpers/embedded-gateway.js'
import { closedPort } from '../helpers/upstream.js'

/** A plain TCP server holding `port` on 127.0.0.1, as another program would. */
async function occupy(port: number): Promise<Server> {
  const server = createServer((socket) => socket.destroy())
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, '127.0.0.1', resolve)
  })
  return server
}

const free = (server: Server) => new Promise((resolve) => server.close(resolve))

t.test('a first start on a busy port prints no key; the next one prints a key that works', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'tgw-bootstrap-port-'))
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))
  const port = await closedPort()
  const metricsPort = await closedPort()

  for (const [variable, busy] of [
    ['PORT', port],
    ['METRICS_PORT', metricsPort],
  ] as const) {
    const holder = await occupy(busy)
    const failed = await startEmbeddedGateway(t, dataDir, { port, metricsPort })
    const code = await failed.exited()
    await free(holder)
    t.equal(code, 1, `${variable} taken: the start fails`)
    t.match(failed.stderr(), `${variable}=${busy} on HOST=127.0.0.1: the port is already in use`, 'and says why')
    t.notMatch(failed.stdout(), /bootstrap/, `${variable} taken: no bootstrap line`)
    t.notMatch(failed.stdout(), /tgw_[0-9A-Za-z]{49}/, `${variable} taken: no key printed at all`)
  }

  const started = await startEmbeddedGateway(t, dataDir, { port, metricsPort })
  // Printed only into an empty database: the failed starts left no account behind.
  const [, , apiKey] = await started.waitForStdout(BOOTSTRAP_LINE, 'the bootstrap line')
  await started.waitListening()
  const listed = await fetch(`${started.base}/v1/sub-accounts`, { headers: { authorization: `Bearer ${apiKey}` } })
  t.equal(listed.status, 200, 'the key printed works against the gateway')
  t.same(await listed.json(), { data: [], next_cursor: null }, 'its parent has no sub-accounts yet')
  await started.stop()
})
