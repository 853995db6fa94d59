// Ports for servers a fault test stops and starts again on the same port.
import { readFileSync } from 'node:fs'
import { createServer, type Server } from 'node:net'
import { sleep } from './poll.js'

/**
 * The kernel's ephemeral range: outgoing connections take their local port from it, so a port
 * in it that a test frees for a moment (to restart a server on it) may be taken meanwhile.
 */
function ephemeralRange(): [number, number] {
  try {
    const [low, high] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number)
    if (low !== undefined && high !== undefined && low > 0 && high >= low) return [low, high]
  } catch {
    // Not Linux: assume the IANA range.
  }
  return [49152, 65535]
}

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer()
    server.once('error', () => resolve(false))
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)))
  })
}

/** The ports this process was handed. */
const handedOut = new Set<number>()

/**
 * A free port below the ephemeral range, for a server the test will stop and start again on the
 * same port: no outgoing connection of any process can be given it meanwhile.
 */
export async function stablePort(): Promise<number> {
  const [low] = ephemeralRange()
  const from = 20_000
  const to = Math.max(from + 1_000, low - 1)
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = from + Math.floor(Math.random() * (to - from))
    // Never twice in one process: two draws in a row (PORT and METRICS_PORT) must differ.
    if (handedOut.has(port)) continue
    if (await canListen(port)) {
      handedOut.add(port)
      return port
    }
  }
  throw new Error('no free port below the ephemeral range')
}

/** Listens on `port`, retrying for a moment if it is still held (a socket in the middle of closing). */
export async function listenOn(server: Server, port: number): Promise<void> {
  const deadline = Date.now() + 5_000
  for (;;) {
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject)
        server.listen(port, '127.0.0.1', () => {
          server.off('error', reject)
          resolve()
        })
      })
      return
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EADDRINUSE' || Date.now() > deadline) throw err
      await sleep(50)
    }
  }
}
