// An answer without a body passes whatever length it names (docs/api.md, "What comes back"; RFC
// 9110 §6.4.1, §8.6): a 304 or 204, and any answer to HEAD, whose head carries a Content-Length
// other than 0 reaches the client whole and at once, and the client's connection carries the next
// request. The client gets that Content-Length on HEAD and 304 (a 304 may give the length of the
// 200 it stands for), none on 204. The upstream is a raw socket server, so that the heads go out
// exactly as written, and it never closes its connection nor sends a byte of body: a gateway
// waiting for the 1,234 bytes named would never answer.
import { createServer } from 'node:net'
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { rawExchange, requestBytes } from '../helpers/hostile.js'
import { listenOnLoopback } from '../helpers/upstream.js'

const HEADS: Record<string, string> = {
  '/not-modified': 'HTTP/1.1 304 Not Modified\r\nETag: "v1"\r\nContent-Length: 1234\r\n\r\n',
  '/no-content': 'HTTP/1.1 204 No Content\r\nContent-Type: text/plain\r\nContent-Length: 1234\r\n\r\n',
  '/head': 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1234\r\n\r\n',
}

// Its connections are left open: none is closed by the upstream (listenOnLoopback ends them).
const upstream = createServer((socket) => {
  socket.on('error', () => {})
  let buffered = ''
  socket.on('data', (chunk: Buffer) => {
    buffered += chunk.toString('latin1')
    for (let end = buffered.indexOf('\r\n\r\n'); end !== -1; end = buffered.indexOf('\r\n\r\n')) {
      const path = buffered.slice(0, end).split(' ', 2)[1]!
      buffered = buffered.slice(end + 4)
      socket.write(HEADS[path] ?? HEADS['/head']!)
    }
  })
})
const { port } = await listenOnLoopback(t, upstream)
const gw = await startGateway(t, { upstreamUrl: `http://127.0.0.1:${port}` })
const parent = await gw.createParent()

/** Two requests for `path` pipelined on one client connection; both answers, or what came. */
async function twice(method: string, path: string) {
  const one = requestBytes({
    method,
    target: path,
    headers: [
      ['Host', 'x'],
      ['Authorization', `Bearer ${parent.apiKey}`],
    ],
  })
  return rawExchange(gw.port, Buffer.concat([one, one]), { until: 2, waitMs: 10_000, head: method === 'HEAD' })
}

const CASES: [string, string, string, number, string | undefined][] = [
  ['a 304 naming the length of its 200', 'GET', '/not-modified', 304, '1234'],
  ['a 204 naming a length', 'GET', '/no-content', 204, undefined],
  ['an answer to HEAD', 'HEAD', '/head', 200, '1234'],
]

for (const [what, method, path, status, length] of CASES) {
  t.test(`${what}: reaches the client whole and at once, the connection kept`, async (t) => {
    const exchange = await twice(method, path)
    t.same(
      exchange.responses.map((res) => res.status),
      [status, status],
      'both answers came, on one connection',
    )
    for (const [i, res] of exchange.responses.entries()) {
      t.equal(res.header('content-length'), length, `answer ${i + 1}: Content-Length ${length ?? 'absent'}`)
      t.equal(res.body, '', `answer ${i + 1}: no body`)
      t.not(res.header('connection'), 'close', `answer ${i + 1}: the connection is not closed`)
    }
    t.equal(exchange.leftover, 0, 'nothing after the heads')
    t.notOk(exchange.closedByServer, 'the gateway kept the connection')
  })
}
