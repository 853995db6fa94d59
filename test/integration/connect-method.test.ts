// CONNECT asks for a tunnel to host:port, a target that is not a path: 400 bad_path in the
// problem+json envelope, and the connection closed (http/parser-refusal.ts). Node hands CONNECT to
// no route; without a listener it closed the connection without a word.
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import { rawExchange } from '../helpers/hostile.js'

const gw = await startGateway(t)
const parent = await gw.createParent()
const port = Number(new URL(gw.url).port)

t.test('CONNECT is 400 bad_path, answered and closed, whatever follows it', async (t) => {
  const cases: [string, string][] = [
    ['to a host and port', 'CONNECT 127.0.0.1:80 HTTP/1.1\r\nHost: 127.0.0.1:80\r\n\r\n'],
    [
      'with a key, and bytes for the tunnel after it',
      `CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nAuthorization: Bearer ${parent.apiKey}\r\n\r\n\x16\x03\x01 hello`,
    ],
    [
      'after a request on the same connection',
      `GET /healthz HTTP/1.1\r\nHost: a\r\n\r\nCONNECT a:1 HTTP/1.1\r\nHost: a:1\r\n\r\n`,
    ],
  ]
  for (const [what, bytes] of cases) {
    const { responses, closedByServer } = await rawExchange(port, bytes, { waitMs: 5000 })
    const answer = responses.at(-1)
    t.equal(answer?.status, 400, `${what}: 400`)
    t.match(answer?.header('content-type'), /^application\/problem\+json/, `${what}: problem+json`)
    t.equal(answer?.json().code, 'bad_path', `${what}: bad_path`)
    t.match(answer?.json().detail, /not tunnels/)
    t.equal(answer?.header('connection'), 'close', `${what}: Connection: close`)
    t.ok(closedByServer, `${what}: the gateway closed the connection`)
  }
  const after = await fetch(`${gw.url}/healthz`)
  t.equal(after.status, 200, 'the gateway serves on')
})
