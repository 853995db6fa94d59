// A TCP relay between the gateway and Postgres (or Redis) that the test can cut or blackhole: a
// real network fault, as the gateway sees one, without disturbing the shared servers.
import { connect, createServer, type Socket } from 'node:net'
import { ADMIN_URL } from '../helpers/db.js'
import type { TestLike } from '../helpers/test-like.js'
import { listenOn, stablePort } from '../helpers/ports.js'

export type RelayMode = 'pass' | 'blackhole' | 'cut'

export interface Relay {
  port: number
  mode(): RelayMode
  /**
   * A partition: every connection stays open, but nothing gets through in either direction, and
   * new connections are accepted and then hear nothing. As with TCP, bytes are held, not lost:
   * restore() delivers them (a short partition heals; nothing is silently corrupted).
   */
  blackhole(): void
  /**
   * The far end is gone: every connection is closed and new ones are refused. `fin` (the
   * default) closes them in order, `rst` resets them (a crashed host, a firewall that rejects).
   */
  cut(how?: 'fin' | 'rst'): Promise<void>
  /** Back to normal: held connections flow again, new ones are accepted and forwarded. */
  restore(): Promise<void>
  /**
   * The next connection that sends `pattern` (client to server) is closed right there, before
   * the chunk is forwarded: a connection lost in the middle of what it was doing. `rst` resets it
   * (a crashed peer, a NAT or firewall dropping state); `fin` closes it in order (a server that
   * shuts down or terminates the backend, a proxy closing it). Resolves once it happened. Other
   * connections are untouched, and new ones are forwarded as usual.
   */
  closeOn(pattern: string, how: 'rst' | 'fin'): Promise<void>
  /** Connections currently open through the relay. */
  open(): number
}

interface Pair {
  client: Socket
  remote: Socket | null
}

/** A relay on a port of its own to `target` (127.0.0.1), closed at teardown. */
export async function startRelay(t: TestLike, target: { host?: string; port: number }): Promise<Relay> {
  const host = target.host ?? '127.0.0.1'
  let mode: RelayMode = 'pass'
  const pairs = new Set<Pair>()

  function drop(pair: Pair, how: 'fin' | 'rst' = 'fin'): void {
    pairs.delete(pair)
    if (how === 'rst' && !pair.client.destroyed) pair.client.resetAndDestroy()
    else pair.client.destroy()
    pair.remote?.destroy()
  }

  let trap: { pattern: Buffer; how: 'rst' | 'fin'; sprung: () => void } | null = null

  function forward(pair: Pair): void {
    const remote = connect(target.port, host)
    pair.remote = remote
    pair.client.on('data', (chunk: Buffer) => {
      if (trap !== null && chunk.includes(trap.pattern)) {
        const { sprung, how } = trap
        trap = null
        drop(pair, how)
        sprung()
        return
      }
      remote.write(chunk)
    })
    remote.on('data', (chunk: Buffer) => pair.client.write(chunk))
    remote.on('error', () => drop(pair))
    remote.on('close', () => drop(pair))
    if (mode === 'blackhole') remote.pause()
  }

  const server = createServer((client) => {
    const pair: Pair = { client, remote: null }
    pairs.add(pair)
    client.on('error', () => drop(pair))
    client.on('close', () => drop(pair))
    if (mode === 'pass') forward(pair)
    else client.pause()
  })

  const port = await stablePort()
  await listenOn(server, port)
  let listening = true

  const relay: Relay = {
    port,
    mode: () => mode,
    blackhole() {
      mode = 'blackhole'
      for (const pair of pairs) {
        pair.client.pause()
        pair.remote?.pause()
      }
    },
    async cut(how = 'fin') {
      mode = 'cut'
      if (listening) {
        listening = false
        await new Promise<void>((resolve) => {
          server.close(() => resolve())
          for (const pair of [...pairs]) drop(pair, how)
        })
      }
      for (const pair of [...pairs]) drop(pair, how)
    },
    async restore() {
      const was = mode
      mode = 'pass'
      if (!listening) {
        await listenOn(server, port)
        listening = true
      }
      if (was !== 'blackhole') return
      for (const pair of pairs) {
        if (pair.remote === null) forward(pair)
        else pair.remote.resume()
        pair.client.resume()
      }
    },
    closeOn(pattern, how) {
      return new Promise<void>((resolve) => {
        trap = { pattern: Buffer.from(pattern), how, sprung: resolve }
      })
    },
    open: () => pairs.size,
  }

  t.teardown(async () => {
    for (const pair of [...pairs]) drop(pair)
    if (listening) await new Promise<void>((resolve) => server.close(() => resolve()))
  })
  return relay
}

/** The test database's URL, pointed at `port` on 127.0.0.1 (a relay) instead. */
export function viaPort(databaseUrl: string, port: number): string {
  const url = new URL(databaseUrl)
  url.hostname = '127.0.0.1'
  url.port = String(port)
  return url.toString()
}

/** Where the tests' Postgres listens (the relay's target). */
export function postgresAddress(): { host: string; port: number } {
  const url = new URL(ADMIN_URL)
  return { host: url.hostname || '127.0.0.1', port: Number(url.port || 5432) }
}
