// An upstream to try the gateway with (`npm run echo-upstream`): it answers every request with
// what the gateway let through, as JSON: the method, the path, the X-Service-* headers and the
// request id it received, and whether an Authorization header reached it (it never should).
// It listens on 127.0.0.1:9000 (the README's UPSTREAM_URL); ECHO_PORT moves it. A request with a
// `tokens` query parameter (a whole number) is answered with `X-Tokens-Used` set to it, for a
// route's meter to count (docs/billing.md, a plan with a monthly quota and a credit top-up).
import { createServer } from 'node:http'

const port = Number(process.env.ECHO_PORT ?? 9000)
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  process.stderr.write(`ECHO_PORT must be a port number from 0 to 65535, got "${process.env.ECHO_PORT}"\n`)
  process.exit(1)
}

const server = createServer((request, response) => {
  const serviceHeaders = Object.fromEntries(
    Object.entries(request.headers).filter(([name]) => name.startsWith('x-service-')),
  )
  const body = {
    method: request.method,
    path: request.url,
    'x-service-headers': serviceHeaders,
    'x-request-id': request.headers['x-request-id'] ?? null,
    authorization_received: request.headers.authorization !== undefined,
  }
  // Drain the request body (unread, it could stall the connection), then answer.
  request.resume()
  const tokens = new URL(request.url ?? '/', 'http://echo').searchParams.get('tokens')
  request.on('end', () => {
    response.writeHead(200, {
      'content-type': 'application/json',
      ...(tokens !== null && /^\d{1,15}$/.test(tokens) ? { 'x-tokens-used': tokens } : {}),
    })
    response.end(`${JSON.stringify(body, null, 2)}\n`)
  })
})

server.on('error', (err: NodeJS.ErrnoException) => {
  const why = err.code === 'EADDRINUSE' ? 'the port is already in use; set ECHO_PORT to another' : err.message
  process.stderr.write(`echo upstream: 127.0.0.1:${port}: ${why}\n`)
  process.exit(1)
})
server.listen(port, '127.0.0.1', () => {
  const { port: bound } = server.address() as { port: number }
  process.stdout.write(`echo upstream listening on http://127.0.0.1:${bound}\n`)
})
