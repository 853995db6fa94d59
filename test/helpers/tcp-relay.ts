// A TCP relay on loopback that a test can cut and heal: one client kept away from a server while
// others reach it (a partition, or a reconnect backoff longer than theirs).
import { createServer, type Socket, connect } from 'node:net'
import type { TestLike } from './test-like.js'

export interface TcpRelay {
  port: number
  /** Ends every relayed connection, and refuses new ones (accepted, then ended) until `heal`. */
  cut(): void
  heal(): void
}

/** Relays connections on a port of its own to `targetPort` on 127.0.0.1; closed at teardown. */
export async function tcpRelay(t: TestLike, targetPort: number): Promise<TcpRelay> {
  const open = new Set<Socket>()
  let cut = false
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
    client.pipe(upstream).pipe(client)
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
  }
}
