// The benches' upstream, bare proxy and webhook receiver, in plain JavaScript so that node starts
// them without tsx (bench:instructions runs them under valgrind). `node bench/servers.js
// upstream|bare|receiver`, env PORT and, for the bare proxy, UPSTREAM_URL. Started by bench/lib.ts
// startUpstream, startBare and startReceiver. With WEBSOCKET=1 (bench:websocket), the upstream also
// echoes WebSocket messages and the bare proxy has `websocket: true`.
import http from 'node:http'

// Gone with the bench that started it (its stdin closes), and an exit on SIGTERM, not a death by
// signal, so that --cpu-prof can write its profile.
process.stdin.on('end', () => process.exit(0)).resume()
process.on('SIGTERM', () => process.exit(0))

const port = Number(process.env.PORT)
if (process.argv[2] === 'upstream') {
  const fixed = Buffer.from('{"ok":true}')
  const server = http.createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      // The proxied path of bench/lib.ts (and any path ending like it, as bench:identity's routes
      // forward theirs) gets a fixed body; any other path the headers this upstream received, so
      // that a bench can check whom the gateway said the request is for.
      const body = req.url.endsWith('/things/1') ? fixed : Buffer.from(JSON.stringify(req.headers))
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length })
      res.end(body)
    })
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
  throw new Error('usage: node bench/servers.js upstream|bare|receiver')
}
