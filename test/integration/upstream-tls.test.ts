// An https upstream must prove who it is (docs/configuration.md): the proxy library the gateway
// builds on turns certificate checks off by default, and the gateway turns them back on.
import { execFile } from 'node:child_process'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { createServer } from 'node:https'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { callAs } from '../helpers/http.js'
import { checkProblem } from '../helpers/problems.js'
import { listenOnLoopback } from '../helpers/upstream.js'

const run = promisify(execFile)

t.test('an https upstream with a certificate nobody vouches for is not proxied to', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tgw-tls-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const [key, cert] = [join(dir, 'key.pem'), join(dir, 'cert.pem')]
  await run('openssl', [
    ...['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'],
    ...['-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'],
  ])
  let reached = 0
  const server = createServer({ key: await readFile(key), cert: await readFile(cert) }, (_request, response) => {
    reached++
    response.end('{"ok":true}')
  })
  const { port } = await listenOnLoopback(t, server)

  const gw = await startGateway(t, {
    gatewayConfig: { routes: [{ prefix: '/v1/secure', upstream: `https://127.0.0.1:${port}` }] },
  })
  const parent = await gw.createParent()
  const res = await callAs(gw.url, parent.apiKey, { path: '/v1/secure/x' })
  checkProblem(t, res, 502, 'upstream_unavailable', 'a self-signed upstream certificate')
  t.equal(reached, 0, 'the request never reached the upstream')
})
