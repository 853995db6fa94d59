// `Expect: 100-continue` (docs/api.md): the gateway answers 100 Continue only once every check has
// passed, the body reaches the upstream without the Expect header, and a refused request gets its
// refusal with no 100 before it. curl adds the header by itself to large uploads.
import { execFile } from 'node:child_process'
import { createHash } from 'node:crypto'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { connect } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { subAccountVia } from '../helpers/gateway-load.js'
import { startGateway } from '../helpers/gateway.js'
import { eventually } from '../helpers/poll.js'
import { startUpstream } from '../helpers/upstream.js'

const run = promisify(execFile)

/**
 * Sends a request head (with Connection: close), then the body only if told 100 Continue; returns
 * all that came back before the gateway closed the connection.
 */
function expectingClient(port: number, head: string, body: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1')
    let text = ''
    let sentBody = false
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1')
      if (!sentBody && text.startsWith('HTTP/1.1 100 Continue\r\n\r\n')) {
        sentBody = true
        socket.write(body)
      }
    })
    socket.on('close', () => resolve(text))
    socket.on('error', reject)
    socket.write(head)
    setTimeout(() => socket.destroy(), 5_000)
  })
}

function head(method: string, path: string, lines: string[]): string {
  return [`${method} ${path} HTTP/1.1`, 'Host: gw', 'Connection: close', 'Expect: 100-continue', ...lines, '', ''].join(
    '\r\n',
  )
}

t.test('curl --data-binary @2MB: 100 after the checks, the whole body upstream, no Expect', async (t) => {
  const upstream = await startUpstream(t)
  const gw = await startGateway(t, {
    gatewayConfig: {
      routes: [
        { prefix: '/v1/uploads', upstream: upstream.url, scopes: { write: ['uploads:write'] } },
        { prefix: '/v1/small', upstream: upstream.url, max_body_bytes: 1000 },
      ],
    },
  })
  const parent = await gw.createParent({ scopes: ['uploads:write'] })
  const readOnly = await gw.createParent({ scopes: ['uploads:read'] })

  const dir = await mkdtemp(join(tmpdir(), 'tgw-expect-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const file = join(dir, 'two-mib.bin')
  const data = Buffer.alloc(2 * 1024 * 1024)
  for (let i = 0; i < data.length; i++) data[i] = (i * 31) % 251
  await writeFile(file, data)
  const curl = (key: string, path: string) =>
    run('curl', ['-sS', '-v', '--data-binary', `@${file}`, '-H', `Authorization: Bearer ${key}`, `${gw.url}${path}`], {
      maxBuffer: 16 * 1024 * 1024,
    })

  const sent = await curl(parent.apiKey, '/v1/uploads/a')
  t.match(sent.stderr, /> Expect: 100-continue/i, 'curl asked for 100-continue by itself')
  t.match(sent.stderr, /< HTTP\/1\.1 100 Continue/, 'and was told to go on')
  t.match(sent.stderr, /< HTTP\/1\.1 200 /, 'then 200')
  const echoed = JSON.parse(sent.stdout) as { bodyBytes: number; bodySha256: string; headers: Record<string, string> }
  t.equal(echoed.bodyBytes, data.length, 'the upstream got the whole body')
  t.equal(echoed.bodySha256, createHash('sha256').update(data).digest('hex'), 'byte for byte')
  t.notOk('expect' in echoed.headers, 'without the Expect header')

  for (const [what, key, path, status] of [
    ['an unknown key', 'tgw_nosuchkeyatall', '/v1/uploads/b', 401],
    ['a key without the route scope', readOnly.apiKey, '/v1/uploads/c', 403],
    ['a body over the route limit', parent.apiKey, '/v1/small/d', 413],
  ] as const) {
    const refused = await curl(key, path)
    t.notMatch(refused.stderr, /< HTTP\/1\.1 100 Continue/, `${what}: no 100`)
    t.match(refused.stderr, new RegExp(`< HTTP/1\\.1 ${status} `), `${what}: ${status}`)
  }
  t.same(
    upstream.received.map((r) => r.url),
    ['/v1/uploads/a'],
    'the upstream saw only the accepted upload',
  )
})

t.test('raw: a refusal is the first and only answer; an accepted one gets 100 first', async (t) => {
  const upstream = await startUpstream(t)
  const gw = await startGateway(t, { gatewayConfig: { routes: [{ prefix: '/v1/x', upstream: upstream.url }] } })
  const parent = await gw.createParent()
  const body = '{"name":"expected"}'
  const lines = (key: string) => [
    `Authorization: Bearer ${key}`,
    'Content-Type: application/json',
    `Content-Length: ${body.length}`,
  ]

  const refused = await expectingClient(gw.port, head('POST', '/v1/x/a', lines('tgw_unknown')), body)
  t.match(refused, /^HTTP\/1\.1 401 /, 'proxied, a bad key: 401 first')
  t.notMatch(refused, /100 Continue/, 'and no 100 at all')

  const accepted = await expectingClient(gw.port, head('POST', '/v1/x/b', lines(parent.apiKey)), body)
  t.match(accepted, /^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 /, 'proxied, accepted: 100, then 200')

  const managed = await expectingClient(
    gw.port,
    head('POST', '/v1/sub-accounts', [...lines(parent.apiKey), 'X-Service-Acting-Tenant: self']),
    body,
  )
  t.match(managed, /^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 201 /, 'management, accepted: 100, then 201')

  const managedRefused = await expectingClient(gw.port, head('POST', '/v1/sub-accounts', lines('tgw_unknown')), body)
  t.match(managedRefused, /^HTTP\/1\.1 401 /, 'management, a bad key: 401 first')
  t.notMatch(managedRefused, /100 Continue/, 'and no 100 at all')

  const tooBig = await expectingClient(
    gw.port,
    head('POST', '/v1/sub-accounts', [
      `Authorization: Bearer ${parent.apiKey}`,
      'X-Service-Acting-Tenant: self',
      'Content-Type: application/json',
      `Content-Length: ${1024 * 1024}`,
    ]),
    '',
  )
  t.match(tooBig, /^HTTP\/1\.1 413 /, 'management, a declared body over its limit: 413 first')
  await eventually(2_000, async () => upstream.received.length === 1)
  t.same(
    upstream.received.map((r) => r.url),
    ['/v1/x/b'],
    'the upstream saw only the accepted request',
  )
})

t.test('a declared body over the limit is refused before the limits take anything', async (t) => {
  const upstream = await startUpstream(t)
  const gw = await startGateway(t, {
    gatewayConfig: { routes: [{ prefix: '/v1/small', upstream: upstream.url, max_body_bytes: 1000 }] },
  })
  const parent = await gw.createParent()
  const sub = await subAccountVia(gw.url, parent.apiKey, 'two a minute', { rate: { requests: 2, per_seconds: 60 } })
  const upload = (length: number) =>
    expectingClient(
      gw.port,
      head('POST', '/v1/small/a', [
        `Authorization: Bearer ${parent.apiKey}`,
        `X-Service-Acting-Tenant: ${sub}`,
        'Content-Type: application/octet-stream',
        `Content-Length: ${length}`,
      ]),
      'x'.repeat(Math.min(length, 10)),
    )
  for (let i = 0; i < 3; i++) t.match(await upload(1024 * 1024), /^HTTP\/1\.1 413 /, `413 ${i + 1}, no 100 before it`)
  // Before the steps, the 413 came after the limits had charged it: these two were 429.
  t.match(await upload(10), /^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 /, 'the rate is whole: 200')
  t.match(await upload(10), /^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 /, 'and 200 again')
  t.match(await upload(10), /^HTTP\/1\.1 429 /, 'then the rate is spent')
})
