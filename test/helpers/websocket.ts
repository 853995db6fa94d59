// WebSocket ends for tests: an upstream (a real `ws` server on 127.0.0.1:0) that echoes and records
// each upgrade it accepted, a client that opens a socket through the gateway, and a raw upgrade
// whose refusal is read as the HTTP answer it must be.
import { randomBytes } from 'node:crypto'
import { createServer, type IncomingHttpHeaders } from 'node:http'
import { WebSocket, WebSocketServer } from 'ws'
import { rawExchange, requestBytes } from './hostile.js'
import type { TestLike } from './test-like.js'
import { listenOnLoopback } from './upstream.js'

export interface WebSocketUpstream {
  url: string
  port: number
  /** The headers of every upgrade the upstream accepted, in order. */
  upgrades: IncomingHttpHeaders[]
  /** The upstream's sockets, open or not, in order. */
  sockets: WebSocket[]
  /** The sockets still open. */
  open(): number
  /** With `holdHandshakes`: the upgrades received and not yet answered. */
  held(): number
  /** With `holdHandshakes`: answers every upgrade held so far (101). */
  release(): void
  close(): Promise<void>
}

export interface WebSocketUpstreamOptions {
  /** The upstream's choice among the offered subprotocols (default: ws's, the first). */
  handleProtocols?: (protocols: Set<string>) => string | false
  /** Sent to each client as soon as its socket opens. */
  greeting?: string
  /** Each upgrade waits, unanswered, until `release()`: an upgrade kept in flight as long as a test needs. */
  holdHandshakes?: boolean
}

/** An echo server: each message comes back as it came (text or binary). */
export async function startWebSocketUpstream(
  t: TestLike,
  options: WebSocketUpstreamOptions = {},
): Promise<WebSocketUpstream> {
  const server = createServer((_request, response) => {
    response.writeHead(426).end()
  })
  const wss = new WebSocketServer({
    noServer: true,
    ...(options.handleProtocols === undefined ? {} : { handleProtocols: options.handleProtocols }),
  })
  const upgrades: IncomingHttpHeaders[] = []
  const sockets: WebSocket[] = []
  const held: (() => void)[] = []
  server.on('upgrade', (request, socket, head) => {
    const answer = () =>
      wss.handleUpgrade(request, socket, head, (ws) => {
        upgrades.push(request.headers)
        sockets.push(ws)
        ws.on('error', () => {})
        ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }))
        if (options.greeting !== undefined) ws.send(options.greeting)
      })
    if (options.holdHandshakes === true) held.push(answer)
    else answer()
  })
  const { port, close } = await listenOnLoopback(t, server)
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    upgrades,
    sockets,
    open: () => sockets.filter((ws) => ws.readyState === ws.OPEN).length,
    held: () => held.length,
    release: () => {
      for (const answer of held.splice(0)) answer()
    },
    close: async () => {
      for (const ws of sockets) ws.terminate()
      wss.close()
      await close()
    },
  }
}

export interface OpenedSocket {
  ws: WebSocket
  /** The close code and reason, once the socket closed. */
  closed: Promise<{ code: number; reason: string; at: number }>
  /** The next message, as text. */
  next(): Promise<string>
}

/** Opens a socket to `url` (http:// is fine); rejects with the HTTP status of a refusal. */
export function openSocket(
  t: TestLike,
  url: string,
  options: { key?: string; protocols?: string[]; headers?: Record<string, string> } = {},
): Promise<OpenedSocket> {
  const ws = new WebSocket(url.replace(/^http/, 'ws'), options.protocols ?? [], {
    headers: { ...(options.key === undefined ? {} : { authorization: `Bearer ${options.key}` }), ...options.headers },
  })
  t.teardown(() => ws.terminate())
  const messages: string[] = []
  const waiting: ((message: string) => void)[] = []
  ws.on('message', (data) => {
    const text = String(data)
    const waiter = waiting.shift()
    if (waiter === undefined) messages.push(text)
    else waiter(text)
  })
  const closed = new Promise<{ code: number; reason: string; at: number }>((resolve) => {
    ws.on('close', (code, reason) => resolve({ code, reason: String(reason), at: performance.now() }))
  })
  return new Promise((resolve, reject) => {
    ws.once('open', () =>
      resolve({
        ws,
        closed,
        next: () => {
          const message = messages.shift()
          return message !== undefined ? Promise.resolve(message) : new Promise((r) => waiting.push(r))
        },
      }),
    )
    ws.once('unexpected-response', (_req, res) => {
      res.resume()
      reject(Object.assign(new Error(`refused with ${res.statusCode}`), { status: res.statusCode }))
    })
    ws.once('error', reject)
  })
}

export interface UpgradeAnswer {
  status: number
  headers: IncomingHttpHeaders
  body: string
  /** The connection was closed after the answer (never left half-open). */
  ended: boolean
}

/**
 * A raw upgrade request on a connection of its own, read as an HTTP answer other than a 101 (a
 * refusal, a redirect; rejects if the upgrade succeeds); `ended` only if the gateway itself closed
 * the connection within 2 s.
 */
export async function answerToUpgrade(url: string, headers: Record<string, string> = {}): Promise<UpgradeAnswer> {
  const { host, port, pathname, search } = new URL(url)
  const sent: Record<string, string> = {
    host,
    connection: 'Upgrade',
    upgrade: 'websocket',
    'sec-websocket-version': '13',
    'sec-websocket-key': randomBytes(16).toString('base64'),
  }
  for (const [name, value] of Object.entries(headers)) sent[name.toLowerCase()] = value
  const bytes = requestBytes({ method: 'GET', target: `${pathname}${search}`, headers: Object.entries(sent) })
  const { responses, closedByServer } = await rawExchange(Number(port), bytes, { waitMs: 2000 })
  const answer = responses[0]
  if (answer === undefined) throw new Error(`no answer to the upgrade of ${url}`)
  if (answer.status === 101) throw new Error('upgraded (101) where a refusal was expected')
  const answerHeaders: IncomingHttpHeaders = {}
  for (const name of Object.keys(answer.headers)) answerHeaders[name] = answer.header(name)
  return { status: answer.status, headers: answerHeaders, body: answer.body, ended: closedByServer }
}
