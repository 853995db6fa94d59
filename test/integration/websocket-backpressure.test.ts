// A proxied WebSocket whose one end reads slower than the other writes: the gateway stops reading
// the writer until the reader catches up, so the frames wait in the writer's buffers and never in
// the gateway's memory (a client that never read, with an echoing upstream, grew a replica by
// 800 MB). Real `ws` ends over real sockets; each direction, then everything arrives in order.
import t, { type Test } from 'tap'
import type { WebSocket } from 'ws'
import { startGateway } from '../helpers/gateway.js'
import { until } from '../helpers/poll.js'
import { openSocket, startWebSocketUpstream } from '../helpers/websocket.js'

const MESSAGE_BYTES = 512 * 1024
const MESSAGES = 128 // 64 MiB: far more than the loopback sockets' kernel buffers hold
/** What must be held back at the writer: half of what it wrote, where the gateway took it all before. */
const HELD_AT_LEAST = (MESSAGE_BYTES * MESSAGES) / 2

const upstream = await startWebSocketUpstream(t)
const gw = await startGateway(t, {
  gatewayConfig: { routes: [{ prefix: '/live', upstream: upstream.url, websocket: true }] },
})
const parent = await gw.createParent()

/** Counts the bytes of the messages `ws` receives, and each message's first byte in order. */
function received(ws: WebSocket) {
  const seen = { bytes: 0, firsts: [] as number[] }
  ws.on('message', (data: Buffer) => {
    seen.bytes += data.length
    seen.firsts.push(data[0]!)
  })
  return seen
}

const message = (i: number) => Buffer.alloc(MESSAGE_BYTES, i % 256)
const sent = Array.from({ length: MESSAGES }, (_, i) => i % 256)

/** Waits until `amount()` has stopped falling: the same value on 20 looks in a row, a second. */
async function settled(t: Test, amount: () => number): Promise<number> {
  let last = -1
  let same = 0
  t.ok(
    await until(
      60_000,
      async () => {
        const now = amount()
        same = now === last ? same + 1 : 0
        last = now
        return same >= 20
      },
      50,
    ),
    'the buffer settles',
  )
  return last
}

t.test('a client that does not read holds the upstream back, not the gateway', async (t) => {
  const socket = await openSocket(t, `${gw.url}/live/echo`, { key: parent.apiKey })
  const far = upstream.sockets.at(-1)!
  const atUpstream = received(far)
  socket.ws.pause()
  for (let i = 0; i < MESSAGES; i++) socket.ws.send(message(i))
  // The upstream has every message, and has echoed each: what the gateway did not take waits there.
  t.ok(await until(60_000, async () => atUpstream.bytes === MESSAGE_BYTES * MESSAGES), 'the upstream has them all')
  t.ok(
    far.bufferedAmount >= HELD_AT_LEAST,
    `the echoes wait at the upstream (${far.bufferedAmount} bytes), not in the gateway`,
  )

  const atClient = received(socket.ws)
  socket.ws.resume()
  t.ok(await until(60_000, async () => atClient.bytes === MESSAGE_BYTES * MESSAGES), 'then every echo arrives')
  t.same(atClient.firsts, sent, 'in order')
  socket.ws.close()
})

t.test('an upstream that does not read holds the client back, not the gateway', async (t) => {
  const socket = await openSocket(t, `${gw.url}/live/sink`, { key: parent.apiKey })
  const far = upstream.sockets.at(-1)!
  far.pause()
  for (let i = 0; i < MESSAGES; i++) socket.ws.send(message(i))
  const held = await settled(t, () => socket.ws.bufferedAmount)
  t.ok(held >= HELD_AT_LEAST, `the messages wait at the client (${held} bytes), not in the gateway`)

  const atUpstream = received(far)
  const atClient = received(socket.ws)
  far.resume()
  t.ok(await until(60_000, async () => atUpstream.bytes === MESSAGE_BYTES * MESSAGES), 'then every message arrives')
  t.same(atUpstream.firsts, sent, 'in order')
  t.ok(await until(60_000, async () => atClient.bytes === MESSAGE_BYTES * MESSAGES), 'and every echo comes back')
  socket.ws.close()
})
