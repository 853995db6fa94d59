// Webhook delivery (src/webhooks/deliver.ts) over real sockets: the Standard Webhooks signature,
// checked with the `standardwebhooks` package; the address checked when the connection is made
// (a literal loopback, a name rebound to loopback); no redirects; the total timeout; 410 and 5xx
// reported; a response body read only up to its cap.
import { execFile } from 'node:child_process'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { createServer as createTlsServer } from 'node:https'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { Webhook } from 'standardwebhooks'
import t, { type Test } from 'tap'
import { deliverWebhook, RESPONSE_BODY_CAP_BYTES, type WebhookEvent } from '../../src/webhooks/deliver.js'
import { generateWebhookSecret } from '../../src/webhooks/signature.js'
import { checkWebhookUrl, type LookupAll } from '../../src/webhooks/url-policy.js'
import { eventually, orTimeout } from '../helpers/poll.js'
import { closedPort, listenOnLoopback } from '../helpers/upstream.js'

const run = promisify(execFile)
const secret = generateWebhookSecret()
const event: WebhookEvent = {
  id: 'evt_01JD0000000000000000000000',
  type: 'api_key.revoked',
  created_at: '2026-11-22T16:00:00.000Z',
  account_id: 'a1',
  data: { object: { id: 'k1', status: 'revoked' } },
}

interface Received {
  body: string
  headers: IncomingMessage['headers']
}

type Handler = (request: IncomingMessage, response: ServerResponse) => void

/** A receiver on 127.0.0.1, port 0, counting the TCP connections and the requests it gets. */
async function receiver(t: Test, handler: Handler, server: Server = createServer()) {
  const requests: Received[] = []
  let connections = 0
  server.on('connection', () => connections++)
  server.on('request', (request: IncomingMessage, response: ServerResponse) => {
    const chunks: Buffer[] = []
    request.on('data', (c: Buffer) => chunks.push(c))
    request.on('end', () => {
      requests.push({ body: Buffer.concat(chunks).toString(), headers: request.headers })
      handler(request, response)
    })
  })
  const { port } = await listenOnLoopback(t, server)
  return { port, requests, connections: () => connections }
}

/** A self-signed certificate for hooks.example.com and 127.0.0.1. */
async function certificate(t: Test): Promise<{ key: Buffer; cert: Buffer }> {
  const dir = await mkdtemp(join(tmpdir(), 'tgw-webhook-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const [key, cert] = [join(dir, 'key.pem'), join(dir, 'cert.pem')]
  await run('openssl', [
    ...['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', key],
    ...['-out', cert, '-days', '1', '-subj', '/CN=hooks.example.com'],
    ...['-addext', 'subjectAltName=DNS:hooks.example.com,IP:127.0.0.1'],
  ])
  return { key: await readFile(key), cert: await readFile(cert) }
}

const ok: Handler = (_request, response) => response.end('ok')
const insecure = { allowInsecure: true }

t.test('a delivery is signed as Standard Webhooks says, and a 2xx succeeds', async (t) => {
  const hook = await receiver(t, (_request, response) => response.writeHead(204).end())
  const result = await deliverWebhook(`http://127.0.0.1:${hook.port}/hook`, secret, event, insecure)
  t.equal(result.status, 204)
  t.equal(result.error, null)
  t.type(result.durationMs, 'number')
  const [got] = hook.requests
  t.equal(got?.headers['content-type'], 'application/json')
  t.equal(got?.headers['webhook-id'], event.id)
  t.match(got?.headers['webhook-timestamp'], /^\d{10}$/)
  const headers = {
    'webhook-id': String(got?.headers['webhook-id']),
    'webhook-timestamp': String(got?.headers['webhook-timestamp']),
    'webhook-signature': String(got?.headers['webhook-signature']),
  }
  t.same(new Webhook(secret).verify(got?.body ?? '', headers), {
    type: event.type,
    timestamp: event.created_at,
    data: event,
  })
  t.throws(
    () => new Webhook(generateWebhookSecret()).verify(got?.body ?? '', headers),
    'another secret does not verify',
  )
})

t.test('secrets are whsec_ and base64 of 32 random bytes', async (t) => {
  const a = generateWebhookSecret()
  t.match(a, /^whsec_[A-Za-z0-9+/]{43}=$/)
  t.equal(Buffer.from(a.slice(6), 'base64').length, 32)
  t.not(a, generateWebhookSecret())
  const bad = await deliverWebhook('http://127.0.0.1:1/', 'not-a-secret', event, insecure)
  t.match(bad, { status: null, error: /whsec_/ })
})

t.test('without allowInsecure, http is refused before any connection', async (t) => {
  const hook = await receiver(t, ok)
  const result = await deliverWebhook(`http://127.0.0.1:${hook.port}/`, secret, event)
  t.match(result, { status: null, error: /must use https/ })
  t.equal(hook.connections(), 0)
})

t.test('the connection refuses a loopback address when insecure is not allowed', async (t) => {
  const tls = await certificate(t)
  const hook = await receiver(t, ok, createTlsServer(tls))
  const url = `https://127.0.0.1:${hook.port}/`
  t.match(await deliverWebhook(url, secret, event, { ca: tls.cert, allowInsecure: true }), { status: 200 }, 'reachable')
  const before = hook.connections()
  const result = await deliverWebhook(url, secret, event, { ca: tls.cert })
  t.match(result, { status: null, error: /127\.0\.0\.1 is a loopback address/ })
  t.equal(hook.connections(), before, 'no connection was made')
})

t.test('a name that resolves elsewhere at delivery (DNS rebinding) is refused at connect', async (t) => {
  const tls = await certificate(t)
  const hook = await receiver(t, ok, createTlsServer(tls))
  let calls = 0
  const rebinding: LookupAll = async () => [{ address: calls++ === 0 ? '93.184.216.34' : '127.0.0.1', family: 4 }]
  const url = `https://hooks.example.com:${hook.port}/`
  await checkWebhookUrl(url, { lookup: rebinding })
  const result = await deliverWebhook(url, secret, event, { ca: tls.cert, lookup: rebinding })
  t.match(result, { status: null, error: /hooks\.example\.com resolves to an address that is not allowed$/ })
  t.notMatch(result.error, /127\.0\.0\.1/, 'the resolved address is not in the delivery record')
  t.equal(calls, 2, 'resolved again at delivery')
  t.equal(hook.connections(), 0, 'nothing connected to the loopback receiver')
})

t.test('a name that resolves at delivery to a special-purpose address is refused, unnamed', async (t) => {
  // ::ffff:0:7f00:1 is SIIT's spelling of 127.0.0.1; 192.0.2.1 is TEST-NET-1.
  for (const address of ['::ffff:0:7f00:1', '192.0.2.1']) {
    let calls = 0
    const rebinding: LookupAll = async () =>
      calls++ === 0 ? [{ address: '93.184.216.34', family: 4 }] : [{ address, family: address.includes(':') ? 6 : 4 }]
    const url = 'https://hooks.example.com/'
    await checkWebhookUrl(url, { lookup: rebinding })
    const result = await deliverWebhook(url, secret, event, { lookup: rebinding })
    t.match(result, { status: null, error: /hooks\.example\.com resolves to an address that is not allowed$/ }, address)
    t.notMatch(result.error, address, 'the resolved address is not in the delivery record')
    t.equal(calls, 2, 'resolved again at delivery')
  }
})

t.test('a redirect is not followed: its status is recorded, its target never contacted', async (t) => {
  const target = await receiver(t, ok)
  const hook = await receiver(t, (_request, response) =>
    response.writeHead(302, { location: `http://127.0.0.1:${target.port}/internal` }).end(),
  )
  const result = await deliverWebhook(`http://127.0.0.1:${hook.port}/`, secret, event, insecure)
  t.match(result, { status: 302, error: /redirects are not followed/ })
  t.equal(target.connections(), 0)
})

t.test('410 and 5xx are reported with their status', async (t) => {
  const gone = await receiver(t, (_request, response) => response.writeHead(410).end())
  t.match(await deliverWebhook(`http://127.0.0.1:${gone.port}/`, secret, event, insecure), {
    status: 410,
    error: /HTTP 410: the endpoint is gone/,
  })
  const failing = await receiver(t, (_request, response) => response.writeHead(503).end('busy'))
  t.match(await deliverWebhook(`http://127.0.0.1:${failing.port}/`, secret, event, insecure), {
    status: 503,
    error: 'HTTP 503',
  })
  const port = await closedPort()
  t.match(await deliverWebhook(`http://127.0.0.1:${port}/`, secret, event, insecure), {
    status: null,
    error: 'connection failed: ECONNREFUSED',
  })
})

t.test('a receiver that never answers: a timeout', async (t) => {
  const hook = await receiver(t, () => {})
  const delivery = deliverWebhook(`http://127.0.0.1:${hook.port}/`, secret, event, { ...insecure, timeoutMs: 300 })
  t.match(await orTimeout(delivery, 30_000, 'still waiting'), { status: null, error: 'timeout' })
})

t.test('the timeout is total: a body that trickles does not hold the delivery', async (t) => {
  const timers = new Set<NodeJS.Timeout>()
  t.teardown(() => timers.forEach(clearInterval))
  const hook = await receiver(t, (_request, response) => {
    response.writeHead(200)
    const timer = setInterval(() => response.write('x'), 20)
    timers.add(timer)
    response.on('close', () => clearInterval(timer))
  })
  const delivery = deliverWebhook(`http://127.0.0.1:${hook.port}/`, secret, event, { ...insecure, timeoutMs: 500 })
  // Without a total bound, 4 KiB a byte every 20 ms would take 80 s.
  t.match(await orTimeout(delivery, 30_000, 'still reading'), { status: 200, error: null }, 'the status came in time')
})

t.test('a huge response body is read only up to the cap, then the connection dropped', async (t) => {
  let written = 0
  let closedAfter = -1
  const chunk = Buffer.alloc(64 * 1024, 'x')
  const hook = await receiver(t, (_request, response) => {
    response.writeHead(200)
    response.on('close', () => (closedAfter = written))
    const pump = () => {
      while (!response.destroyed) {
        written += chunk.length
        if (!response.write(chunk)) return void response.once('drain', pump)
      }
    }
    pump()
  })
  const result = await deliverWebhook(`http://127.0.0.1:${hook.port}/`, secret, event, {
    ...insecure,
    timeoutMs: 10_000,
  })
  t.match(result, { status: 200, error: null })
  t.ok(RESPONSE_BODY_CAP_BYTES <= 64 * 1024)
  await eventually(10_000, async () => closedAfter >= 0)
  t.ok(closedAfter >= 0 && closedAfter < 64 * 1024 * 1024, `the receiver was cut off after ${closedAfter} bytes`)
})
