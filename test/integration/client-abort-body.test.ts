// A client that closes its connection before its request body is whole, on the routes the gateway
// answers itself (the management API and the token endpoint): Node's `aborted` carries ECONNRESET,
// as a lost Postgres connection does, and was answered 503 store_unavailable, logged as an error
// and counted as a 5xx. It is the client's doing: a 400 if anyone still listens, an info line, no
// 5xx and no error.
import { connect } from 'node:net'
import pino from 'pino'
import t from 'tap'
import { loggerOptions } from '../../src/ops/logging.js'
import { metricValue, startGateway } from '../helpers/gateway.js'
import { parseResponses } from '../helpers/hostile.js'
import { until } from '../helpers/poll.js'

const written: string[] = []
const logger = pino(loggerOptions('info'), { write: (line: string) => written.push(line) })
const gw = await startGateway(t, { logger })
const parent = await gw.createParent()
const port = Number(new URL(gw.url).port)

/**
 * Sends a head promising 100 bytes of body, waits for the gateway's 100 Continue (so that the
 * gateway is reading the body: a reset could otherwise drop the head unread), sends fewer, then
 * half-closes (`end`) or resets the connection; resolves with what came back after the 100.
 */
function cutShort(head: string, partial: string, how: 'end' | 'reset'): Promise<Buffer> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1')
    let received = Buffer.alloc(0)
    let continued = false
    socket.on('data', (chunk: Buffer) => {
      received = Buffer.concat([received, chunk])
      if (continued) return
      const end = received.indexOf('\r\n\r\n')
      if (end === -1 || !received.subarray(0, end).toString('latin1').startsWith('HTTP/1.1 100 ')) return
      continued = true
      received = received.subarray(end + 4)
      socket.write(partial, () => {
        if (how === 'end') socket.end()
        else socket.resetAndDestroy()
      })
    })
    socket.on('error', () => {})
    socket.on('close', () => resolve(received))
    socket.write(`${head}Expect: 100-continue\r\nContent-Length: 100\r\n\r\n`)
  })
}

const routes = {
  management: {
    head: `POST /v1/sub-accounts HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer ${parent.apiKey}\r\nX-Service-Acting-Tenant: self\r\nContent-Type: application/json\r\n`,
    partial: '{"name":',
    kind: 'management',
    answer: /"code":"bad_request"/,
  },
  token: {
    head: 'POST /oauth2/token HTTP/1.1\r\nHost: a\r\nContent-Type: application/x-www-form-urlencoded\r\n',
    partial: 'grant_type=',
    kind: 'token',
    // The parser's own refusal of the cut-short request may answer first: a 400 either way.
    answer: /"error":"invalid_request"|"code":"bad_request"/,
  },
}

for (const [name, route] of Object.entries(routes)) {
  t.test(`${name}: a body cut short by the client is a client abort, not the store's failure`, async (t) => {
    const serverErrors = () => metricValue(gw.app, 'tgw_http_requests_total', { kind: route.kind, status_class: '5xx' })
    const before = await serverErrors()
    const aborts = () => written.filter((line) => line.includes('"msg":"client abort"')).length
    const abortsBefore = aborts()

    const ended = parseResponses(await cutShort(route.head, route.partial, 'end'))
    t.equal(ended.responses[0]?.status, 400, 'half-closed: 400')
    t.match(ended.responses[0]?.body, route.answer)

    await cutShort(route.head, route.partial, 'reset')
    t.ok(await until(5000, async () => aborts() >= abortsBefore + 2), 'each logged as a client abort')
    t.equal(await serverErrors(), before, 'no 5xx counted')
    const errors = written.filter((line) => /"level":(50|60)/.test(line))
    t.same(errors, [], 'nothing logged as an error')
  })
}
