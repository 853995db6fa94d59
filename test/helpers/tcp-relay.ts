// A TCP relay on loopback that a test can cut and heal: one client kept away from a server while
// others reach it (a partition, or a reconnect backoff longer than theirs); or hold, so that what
// a client sent reaches the server only after what a later connection sends (a cancel's race).
import { createServer, type Socket, connect } from 'node:net'
import type { TestLike } from './test-like.js'

export interface TcpRelay {
  port: number
  /** Ends every relayed connection, and refuses new ones (accepted, then ended) until `heal`. */
  cut(): void
  heal(): void
  /**
   * Keeps what the clients connected now send, until `release`: they seem to have sent it, the
   * server has not read it. Connections made meanwhile pass as ever.
   */
  hold(): void
  /** Sends what `hold` kept, and passes everything from then on. */
  release(): void
  /** Connections relayed so far, how many of them have closed, and the bytes `hold` keeps now. */
  readonly connections: { opened: number; closed: number; heldBytes: number }
}

/** Relays connections on a port of its own to `targetPort` on 127.0.0.1; closed at teardown. */
export async function tcpRelay(t: TestLike, targetPort: number): Promise<TcpRelay> {
  const open = new Set<Socket>()
  let cut = false
  const connections = { opened: 0, closed: 0, heldBytes: 0 }
  /** The held clients' sockets to the server, each with what it was not sent yet. */
  const held = new Map<Socket, Buffer[]>()
  const server = createServer((client) => {
    client.on('error', () => {})
    if (cut) {
      client.destroy()
      return
    }
    const upstream = connect(targetPort, '127.0.0.1')
    upstream.on('error', () => client.destroy())
    client.on('close', () => upstream.destroy())
    upstream.on('close', () => client.destroy())
    open.add(client).add(upstream)
    client.once('close', () => open.delete(client))
    upstream.once('close', () => open.delete(upstream))
    connections.opened += 1
    client.once('close', () => {
      connections.closed += 1
    })
    client.on('data', (chunk: Buffer) => {
      const kept = held.get(upstream)
      if (kept === undefined) upstream.write(chunk)
      else {
        kept.push(chunk)
        connections.heldBytes += chunk.length
      }
    })
    upstream.pipe(client)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(
    () =>
      new Promise<void>((resolve) => {
        for (const socket of open) socket.destroy()
        server.close(() => resolve())
      }),
  )
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('relay has no port')
  return {
    port: address.port,
    cut() {
      cut = true
      for (const socket of open) socket.destroy()
    },
    heal() {
      cut = false
    },
    hold() {
      for (const socket of open) if (socket.remotePort === targetPort) held.set(socket, [])
    },
    release() {
      for (const [upstream, kept] of held) for (const chunk of kept) upstream.write(chunk)
      held.clear()
      connections.heldBytes = 0
    },
    connections,
  }
}
