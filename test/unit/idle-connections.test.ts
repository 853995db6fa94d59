// Which connections MAX_CONNECTIONS may close to make room (http/server-limits.ts): on a plain Node
// HTTP server over real sockets, closeIdleKeepAlive closes a connection between requests and none
// that is busy: one that has sent nothing yet, a head still arriving, a request not yet answered,
// an answer ended but not yet written out to a client that reads slowly, an upgraded connection;
// and limitConnections puts that to use for a connection that arrives at the limit.
import { createServer, type ServerResponse } from 'node:http'
import { type AddressInfo, connect, type Socket } from 'node:net'
import t from 'tap'
import { closeIdleKeepAlive, evictionBatch, limitConnections } from '../../src/http/server-limits.js'
import { until } from '../helpers/poll.js'
import type { TestLike } from '../helpers/test-like.js'

const BIG = 32 * 1024 * 1024

async function listening(t: TestLike) {
  const answers: ServerResponse[] = []
  const server = createServer((request, response) => {
    answers.push(response)
    if (request.url === '/held') return
    if (request.url === '/big') response.end(Buffer.alloc(BIG))
    else response.end('ok')
  })
  server.on('upgrade', (_request, socket: Socket) => {
    socket.on('error', () => {})
    socket.write('HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n')
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    server.closeAllConnections()
    server.close()
  })
  const port = (server.address() as AddressInfo).port
  const sockets: Socket[] = []
  /** A client connection that sends `bytes` and counts what it receives. */
  const client = async (bytes: string) => {
    const socket = connect(port, '127.0.0.1')
    socket.on('error', () => {})
    sockets.push(socket)
    let received = 0
    socket.on('data', (chunk: Buffer) => {
      received += chunk.length
    })
    await new Promise((resolve) => socket.once('connect', resolve))
    if (bytes !== '') socket.write(bytes)
    return { socket, received: () => received }
  }
  t.teardown(() => {
    for (const socket of sockets) socket.destroy()
  })
  return { server, answers, client }
}

const get = (path: string, extra = '') => `GET ${path} HTTP/1.1\r\nHost: x\r\n${extra}\r\n`

t.test('only connections between requests are closed', async (t) => {
  const { server, answers, client } = await listening(t)
  const idle = [await client(get('/')), await client(get('/'))]
  const fresh = await client('')
  const arriving = await client('GET / HTTP/1.1\r\nHo')
  const held = await client(get('/held'))
  const upgraded = await client(get('/', 'Connection: Upgrade\r\nUpgrade: x\r\n'))
  const slowReader = await client('')
  slowReader.socket.pause()
  slowReader.socket.write(get('/big'))
  t.ok(
    await until(5_000, async () => idle[0]!.received() > 0 && idle[1]!.received() > 0 && upgraded.received() > 0),
    'the idle ones were answered, the upgrade taken',
  )
  const big = () => answers.find((answer) => answer.req.url === '/big')
  t.ok(
    await until(5_000, async () => big()?.writableEnded === true && answers.some((a) => a.req.url === '/held')),
    'the big answer has ended, the held request arrived',
  )
  t.notOk(big()!.writableFinished, 'and is not yet written out: its client reads nothing')

  t.equal(closeIdleKeepAlive(server, Number.POSITIVE_INFINITY), 2, 'two were closed')
  t.ok(await until(3_000, async () => idle.every((c) => c.socket.closed)), 'the two idle keep-alive connections')
  for (const [name, busy] of Object.entries({ fresh, arriving, held, upgraded, slowReader }))
    t.notOk(busy.socket.closed, `not the ${name} one`)

  // Each busy one still completes.
  slowReader.socket.resume()
  t.ok(await until(10_000, async () => slowReader.received() > BIG), 'the slow reader gets the whole answer')
  answers.find((answer) => answer.req.url === '/held')!.end('late')
  t.ok(await until(3_000, async () => held.received() > 0), 'the held request is answered')
  arriving.socket.write('st: x\r\n\r\n')
  t.ok(await until(3_000, async () => arriving.received() > 0), 'the arriving head is answered')
  t.notOk(upgraded.socket.closed, 'the upgraded connection is still open')
})

t.test('at most `most` are closed; the batch is a 64th of the limit, at least one', async (t) => {
  const { server, client } = await listening(t)
  const idle = [await client(get('/')), await client(get('/')), await client(get('/'))]
  t.ok(await until(3_000, async () => idle.every((c) => c.received() > 0)), 'answered')
  t.equal(closeIdleKeepAlive(server, 2), 2)
  t.ok(await until(3_000, async () => idle.filter((c) => c.socket.closed).length === 2), 'two closed')
  t.equal(idle.filter((c) => c.socket.closed).length, 2, 'the third kept')
  t.same([1, 3, 64, 65, 500, 10_000].map(evictionBatch), [1, 1, 1, 2, 8, 157])
})

t.test('limitConnections: a connection at the limit takes an idle one’s place, else is closed', async (t) => {
  const { server, answers, client } = await listening(t)
  limitConnections(server, 2)
  const first = await client(get('/'))
  const second = await client(get('/held'))
  t.ok(await until(3_000, async () => first.received() > 0), 'the first is answered and idle')
  const third = await client(get('/'))
  t.ok(await until(3_000, async () => third.received() > 0), 'the third is served')
  t.ok(await until(3_000, async () => first.socket.closed), 'in the idle one’s place')
  t.notOk(second.socket.closed, 'the held request keeps its connection')
  // The third is idle now: a fourth takes its place; with both busy, a fifth is closed.
  const fourth = await client(get('/held'))
  t.ok(await until(3_000, async () => third.socket.closed), 'the idle third makes room for the fourth')
  const fifth = await client(get('/'))
  t.ok(await until(3_000, async () => fifth.socket.closed), 'with none idle, the fifth is closed')
  t.equal(fifth.received(), 0, 'unanswered')
  t.notOk(second.socket.closed || fourth.socket.closed, 'the busy ones are kept')

  // Once one is idle again, an arrival takes its place: at once, or once the pause that follows a
  // walk that found none idle (FRUITLESS_WALK_PAUSE_MS) has passed.
  answers.find((answer) => answer.req.url === '/held')!.end('late')
  t.ok(await until(3_000, async () => second.received() > 0), 'the second is answered, and idle')
  const served = async () => {
    const arrival = await client(get('/'))
    await until(1_000, async () => arrival.received() > 0 || arrival.socket.closed)
    return arrival.received() > 0
  }
  t.ok(await until(3_000, served), 'an arrival is served in its place')
  t.ok(await until(3_000, async () => second.socket.closed), 'the second was closed for it')
  t.notOk(fourth.socket.closed, 'the fourth, still busy, is kept')
})
