// The benches' upstream, bare proxy, floor proxy (and fastify over it) and webhook receiver, in plain
// JavaScript so that node starts them without tsx (bench:instructions runs them under valgrind).
// `node bench/servers.js upstream|bare|floor|headers-floor|fastify-floor|receiver`, env PORT and, for the proxies, UPSTREAM_URL.
// Started by bench/lib.ts startUpstream, startBare and startReceiver. With WEBSOCKET=1
// (bench:websocket), the upstream also echoes WebSocket messages and the proxies pass them.
import { randomUUID } from 'node:crypto'
import http from 'node:http'

// Gone with the bench that started it (its stdin closes), and an exit on SIGTERM, not a death by
// signal, so that --cpu-prof can write its profile.
process.stdin.on('end', () => process.exit(0)).resume()
process.on('SIGTERM', () => process.exit(0))

const port = Number(process.env.PORT)

/**
 * The floor's handler: the request streamed through an undici Pool to `upstreamUrl`, the answer
 * back. `contractHeaders`: also the headers the gateway's contract makes every proxied exchange
 * carry, with fixed values (the headers-floor side): client X-Service-* dropped, the four trusted
 * headers, X-Request-Id and X-Forwarded-For/-Proto/-Host added upstream, X-Request-Id on the answer.
 */
async function floorForward(upstreamUrl, contractHeaders = false) {
  const { Pool } = await import('undici')
  const pool = new Pool(new URL(upstreamUrl).origin)
  // Hop-by-hop (RFC 9110 §7.6.1): each connection's own, never forwarded; undici refuses most of them.
  const HOP = ['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade']
  const endToEnd = (headers) => {
    for (const name of HOP) delete headers[name]
    return headers
  }
  // Ids and scopes as long as the gateway's (http/request-id.ts; a parent key's scopes), so that the
  // side writes as many bytes as the gateway does.
  const stem = randomUUID().slice(0, 24)
  let counter = 0
  const withContract = (req, id) => {
    const out = {
      'x-service-resolved-tenant': '0b8a3c2e-5d4f-4e6a-9b1c-2d3e4f5a6b7c',
      'x-service-caller-tenant': '1c9b4d3f-6e5a-4f7b-8c2d-3e4f5a6b7c8d',
      'x-service-key-id': '2d0c5e4a-7f6b-4a8c-9d3e-4f5a6b7c8d9e',
      'x-service-scopes': 'sub_accounts:read sub_accounts:write',
      'x-request-id': id,
      'x-forwarded-for': req.socket.remoteAddress,
      'x-forwarded-proto': 'http',
      'x-forwarded-host': req.headers.host,
    }
    for (const name in req.headers)
      if (!name.startsWith('x-service-') && !HOP.includes(name)) out[name] = req.headers[name]
    return out
  }
  return (req, res) => {
    const hasBody = req.headers['content-length'] !== undefined || req.headers['transfer-encoding'] !== undefined
    const id = contractHeaders ? stem + (++counter).toString(16).padStart(12, '0') : ''
    pool.stream(
      {
        method: req.method,
        path: req.url,
        headers: contractHeaders ? withContract(req, id) : endToEnd({ ...req.headers }),
        body: hasBody ? req : null,
      },
      ({ statusCode, headers }) => {
        const answer = endToEnd(headers)
        if (contractHeaders) answer['x-request-id'] = id
        res.writeHead(statusCode, answer)
        return res
      },
      (err) => {
        if (err === null) return
        if (!res.headersSent) res.writeHead(502).end()
        else res.destroy()
      },
    )
  }
}
if (process.argv[2] === 'upstream') {
  const fixed = Buffer.from('{"ok":true}')
  const meter = process.env.METER === '1'
  // DELAY_MS: every answer that long after its request (a slow target: bench:upstream-retries).
  const delayMs = Number(process.env.DELAY_MS ?? 0)
  const server = http.createServer((req, res) => {
    req.resume()
    req.on('end', () => (delayMs > 0 ? setTimeout(answer, delayMs) : answer()))
    function answer() {
      // The proxied path of bench/lib.ts (and any path ending like it, as bench:identity's routes
      // forward theirs) gets a fixed body; any other path the headers this upstream received, so
      // that a bench can check whom the gateway said the request is for.
      const body = req.url.endsWith('/things/1') ? fixed : Buffer.from(JSON.stringify(req.headers))
      // METER=1: every answer reports units, as a metered upstream does (bench:proxy, BENCH_METERS).
      const head = { 'content-type': 'application/json', 'content-length': body.length }
      if (meter) head['x-tokens-used'] = '42'
      res.writeHead(200, head)
      res.end(body)
    }
  })
  // Longer than any round, so that no proxy's pool sees its idle sockets closed between rounds.
  server.keepAliveTimeout = 600_000
  if (process.env.WEBSOCKET === '1') {
    const { WebSocketServer } = await import('ws')
    const wss = new WebSocketServer({ server })
    wss.on('connection', (ws) => ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary })))
  }
  server.listen(port, '127.0.0.1')
} else if (process.argv[2] === 'bare') {
  // What @fastify/http-proxy's own benchmarks/fastify-proxy.js runs: no auth, logger off.
  const { default: Fastify } = await import('fastify')
  const { default: httpProxy } = await import('@fastify/http-proxy')
  const app = Fastify({ logger: false })
  await app.register(httpProxy, { upstream: process.env.UPSTREAM_URL, websocket: process.env.WEBSOCKET === '1' })
  await app.listen({ host: '127.0.0.1', port })
} else if (process.argv[2] === 'fastify-floor') {
  // A control: fastify in front of the floor's own handler (the reply hijacked), so that fastify's
  // cost per request (its router, request and reply objects, hooks) is measured apart.
  const { default: Fastify } = await import('fastify')
  const forward = await floorForward(process.env.UPSTREAM_URL)
  const app = Fastify({ logger: false })
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('*', (_request, payload, done) => done(null, payload))
  const handler = (request, reply) => {
    reply.hijack()
    forward(request.raw, reply.raw)
  }
  for (const url of ['/', '/*'])
    app.route({ url, method: ['DELETE', 'GET', 'HEAD', 'PATCH', 'POST', 'PUT', 'OPTIONS'], handler })
  await app.listen({ host: '127.0.0.1', port })
} else if (process.argv[2] === 'floor' || process.argv[2] === 'headers-floor') {
  // The least a Node proxy does: node:http, each request streamed through an undici Pool into the
  // response, with no framework, no auth, no logging. With WEBSOCKET=1, `ws` pipes each socket to
  // one of its own on the upstream. headers-floor: the same, with the contract's headers.
  const upstream = new URL(process.env.UPSTREAM_URL)
  const server = http.createServer(await floorForward(process.env.UPSTREAM_URL, process.argv[2] === 'headers-floor'))
  server.keepAliveTimeout = 600_000
  if (process.env.WEBSOCKET === '1') {
    const { WebSocket, WebSocketServer } = await import('ws')
    const wss = new WebSocketServer({ server })
    wss.on('connection', (client, req) => {
      const far = new WebSocket(`ws://${upstream.host}${req.url}`)
      const queued = []
      client.on('message', (data, isBinary) =>
        far.readyState === WebSocket.OPEN ? far.send(data, { binary: isBinary }) : queued.push([data, isBinary]),
      )
      far.on('open', () => {
        for (const [data, binary] of queued.splice(0)) far.send(data, { binary })
      })
      far.on('message', (data, isBinary) => client.send(data, { binary: isBinary }))
      far.on('close', () => client.close())
      client.on('close', () => far.close())
      far.on('error', () => client.terminate())
      client.on('error', () => far.terminate())
    })
  }
  server.listen(port, '127.0.0.1')
} else if (process.argv[2] === 'receiver') {
  // A webhook receiver that verifies nothing: 204 to every POST, keeping its webhook-id and when
  // its headers arrived (ms since the epoch, to a fraction), for GET /received?from=<index>.
  const received = []
  const server = http.createServer((req, res) => {
    if (req.method === 'POST') {
      received.push([req.headers['webhook-id'] ?? '', performance.timeOrigin + performance.now()])
      req.resume()
      req.on('end', () => {
        res.writeHead(204)
        res.end()
      })
      return
    }
    const from = Number(new URL(req.url, 'http://receiver').searchParams.get('from') ?? 0)
    const body = Buffer.from(JSON.stringify({ total: received.length, received: received.slice(from) }))
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length })
    res.end(body)
  })
  server.keepAliveTimeout = 600_000
  server.listen(port, '127.0.0.1')
} else {
  throw new Error('usage: node bench/servers.js upstream|bare|floor|fastify-floor|receiver')
}
