// The upstream's answer as the client gets it (docs/api.md), written by the gateway itself
// (src/proxy/upstream-call.ts): the odd heads an upstream can send, from a raw socket, and a body
// larger than every buffer on the way to a client that pauses.
import { createServer, type Socket } from 'node:net'
import { Agent, request as httpRequest } from 'node:http'
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { rawRequest, sha256 } from '../helpers/http.js'
import { until } from '../helpers/poll.js'
import { checkProblem } from '../helpers/problems.js'
import type { TestLike } from '../helpers/test-like.js'
import { listenOnLoopback, startUpstream } from '../helpers/upstream.js'

/** Raw answers by path, written as they are (no Node server would write most of them). */
const RAW: Record<string, string> = {
  '/raw/status-600': 'HTTP/1.1 600 Odd\r\nContent-Length: 0\r\n\r\n',
  '/raw/no-content': 'HTTP/1.1 204 No Content\r\nContent-Type: text/plain\r\nContent-Length: 0\r\n\r\n',
  '/raw/cookies': 'HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 2\r\n\r\nok',
  '/raw/odd-char': 'HTTP/1.1 200 OK\r\nX-Odd: a\x7fb\r\nContent-Length: 2\r\n\r\nok',
  '/raw/head': 'HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n',
  '/base/based/moved':
    'HTTP/1.1 302 Found\r\nLocation: /base/based/there\r\nX-Elsewhere: 1\r\nContent-Length: 0\r\n\r\n',
  '/base/based/away': 'HTTP/1.1 302 Found\r\nLocation: http://elsewhere/base/based/x\r\nContent-Length: 0\r\n\r\n',
  // Answered as soon as the head came, the body not read yet.
  '/raw/early': 'HTTP/1.1 413 Payload Too Large\r\nContent-Length: 4\r\n\r\nlate',
}

async function rawUpstream(t: TestLike) {
  const server = createServer((socket: Socket) => {
    let head = ''
    const onData = (chunk: Buffer) => {
      head += chunk.toString('latin1')
      const end = head.indexOf('\r\n\r\n')
      if (end === -1) return
      socket.off('data', onData)
      const path = head.slice(0, head.indexOf('\r\n')).split(' ')[1]!.split('?')[0]!
      // One answer a connection: its end tells undici not to send another request on it.
      const answer = RAW[path] ?? 'HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n'
      socket.write(answer.replace('\r\n', '\r\nConnection: close\r\n'), 'latin1')
      // The rest (an early answer's body) is read and dropped.
      socket.on('data', () => {})
      setTimeout(() => socket.end(), 200)
    }
    socket.on('data', onData)
    socket.on('error', () => {})
  })
  const { port } = await listenOnLoopback(t, server)
  return `http://127.0.0.1:${port}`
}

t.test("odd heads from the upstream, and the client's side of them", async (t) => {
  const upstream = await rawUpstream(t)
  const gw = await startGateway(t, {
    gatewayConfig: {
      routes: [
        { prefix: '/raw', upstream, public: true },
        { prefix: '/based', upstream: `${upstream}/base`, public: true },
      ],
    },
  })

  const odd = await rawRequest(gw.url, { path: '/raw/status-600' })
  checkProblem(t, odd, 502, 'upstream_unavailable', 'a status past 599')

  const empty = await rawRequest(gw.url, { path: '/raw/no-content' })
  t.equal(empty.status, 204)
  t.equal(empty.headers['content-type'], undefined, 'a 204 has no Content-Type')
  t.equal(empty.headers['content-length'], undefined, 'nor a Content-Length')

  const cookies = await rawRequest(gw.url, { path: '/raw/cookies' })
  t.equal(cookies.body, 'ok')
  t.same(cookies.headers['set-cookie'], ['a=1', 'b=2'], 'both cookies, each on its own line')
  // undici's parser refuses a character no header may hold: nothing of such an answer is passed on.
  checkProblem(t, await rawRequest(gw.url, { path: '/raw/odd-char' }), 502, 'upstream_unavailable', 'DEL in a header')
  t.match(cookies.headers['x-request-id'], /^[0-9a-f-]{36}$/, "the gateway's request id beside the upstream's headers")

  const head = await rawRequest(gw.url, { method: 'HEAD', path: '/raw/head' })
  t.equal(head.status, 200)
  t.equal(head.headers['content-length'], '5', "a HEAD answer keeps the GET's length")
  t.equal(head.body, '')

  const moved = await rawRequest(gw.url, { path: '/based/moved' })
  t.equal(moved.status, 302)
  t.equal(moved.headers.location, '/based/there', "a Location under the upstream's base path is moved under the route")
  const away = await rawRequest(gw.url, { path: '/based/away' })

  t.equal(away.headers.location, 'http://elsewhere/base/based/x', 'an absolute one is left alone')

  // The upstream answers before it read the body, to a keep-alive client: the connection cannot
  // carry another request, and the client is told so (else its upload stalls on it).
  const agent = new Agent({ keepAlive: true })
  t.teardown(() => agent.destroy())
  const early = await new Promise<{ status: number; connection: string | undefined; body: string }>(
    (resolve, reject) => {
      const request = httpRequest(
        {
          host: new URL(gw.url).hostname,
          port: new URL(gw.url).port,
          path: '/raw/early',
          method: 'POST',
          agent,
          headers: { 'content-length': String(8 * 1024 * 1024) },
        },
        (response) => {
          let body = ''
          response.on('data', (chunk: Buffer) => {
            body += chunk.toString()
          })
          response.on('end', () =>
            resolve({ status: response.statusCode!, connection: response.headers.connection, body }),
          )
        },
      )
      request.on('error', reject)
      request.end(Buffer.alloc(8 * 1024 * 1024, 1))
    },
  )
  t.equal(early.status, 413)
  t.equal(early.body, 'late')
  t.equal(early.connection, 'close', 'Connection: close before the body was read whole')
  t.ok(
    await until(
      3_000,
      async () => Object.values(agent.sockets).flat().length + Object.values(agent.freeSockets).flat().length === 0,
    ),
    "the client's connection closed",
  )
})

t.test('a body larger than the buffers reaches a client that pauses, whole', async (t) => {
  const body = Buffer.alloc(24 * 1024 * 1024)
  for (let i = 0; i < body.length; i += 4096) body.writeUInt32BE(i, i)
  let upstreamDone = 0
  const upstream = await startUpstream(t, (_request, response) => {
    response.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': body.length })
    response.end(body, () => {
      upstreamDone = performance.now()
    })
  })
  const gw = await startGateway(t, {
    gatewayConfig: { routes: [{ prefix: '/big', upstream: upstream.url, public: true }] },
  })
  const url = new URL(gw.url)
  let clientResumed = 0
  const got = await new Promise<{ chunks: Buffer[]; chunked: boolean }>((resolve, reject) => {
    const request = httpRequest({ host: url.hostname, port: url.port, path: '/big/file', agent: false }, (response) => {
      const chunks: Buffer[] = []
      response.pause()
      // Nothing read for half a second: every buffer on the way fills, and the upstream must wait.
      setTimeout(() => {
        response.on('data', (chunk: Buffer) => chunks.push(chunk))
        clientResumed = performance.now()
        response.resume()
      }, 500)
      response.on('end', () => resolve({ chunks, chunked: response.headers['transfer-encoding'] === 'chunked' }))
      response.on('error', reject)
    })
    request.on('error', reject)
    request.end()
  })
  t.equal(sha256(Buffer.concat(got.chunks)), sha256(body), 'every byte, in order')
  t.notOk(got.chunked, 'with the Content-Length the upstream gave')
  // Had the gateway read on regardless, the upstream would have written it all at once.
  t.ok(upstreamDone > clientResumed, "the upstream's writing waited for the client's reading")
})
