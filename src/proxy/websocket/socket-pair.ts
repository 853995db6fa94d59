// One proxied WebSocket: the client's socket and the upstream's, frames passed both ways as they
// come (pings and pongs too, so that either end's keep-alive reaches the other), and ended on
// both sides whatever ends it: a close from either end, a message over the route's bound (1009),
// no frame for the idle timeout, the credentials' end (1008), or the gateway's shutdown (1001).
// A side that reads slower than the other writes holds the writer back (`relay`): the frames wait
// in the writer's buffers, not in the gateway's memory.
import type { RawData, WebSocket } from 'ws'
import type { TrackedSocket } from './open-sockets.js'
import type { RouteWebSocket } from './route-options.js'

/** What ended a socket: the close code and reason sent to both ends. */
export interface Ending {
  readonly code: number
  readonly reason: string
}

export const ENDINGS = {
  revoked: { code: 1008, reason: 'credentials revoked' },
  deactivated: { code: 1008, reason: 'tenant deactivated' },
  tokenExpired: { code: 1008, reason: 'token expired' },
  idle: { code: 1001, reason: 'idle timeout' },
  shutdown: { code: 1001, reason: 'going away' },
  tooBig: { code: 1009, reason: 'message too big' },
  // RFC 6455 §7.4.1 (IANA registry): 1012 Service Restart, "reconnect": the new one lands on the tenant's new cell.
  cellChanged: { code: 1012, reason: 'tenant placed in another cell' },
} as const satisfies Record<string, Ending>

/**
 * Bytes waiting to be written to one side past which the other side is no longer read, until they
 * are written. The kernel's socket buffers come first; past them, a frame or two in flight.
 */
export const RELAY_HIGH_WATER_BYTES = 64 * 1024

/** The most a frame adds to its payload on the wire (RFC 6455 §5.2: 2 + 8 bytes of length + 4 of mask). */
const FRAME_HEADER_BYTES = 14

/** A message's or control frame's payload size, as ws hands it over. */
const sizeOf = (data: RawData): number =>
  Array.isArray(data) ? data.reduce((sum, part) => sum + part.length, 0) : data.byteLength

/**
 * Passes one frame of `bytes` from `from` to `to` (`write` sends it, and calls `written` back once
 * it is written, when given one), and stops reading `from` while `to` has more than
 * RELAY_HIGH_WATER_BYTES waiting. Only a frame that may take `to` past the mark asks to be told
 * (a callback costs the write a tick); the last such frame to be written finds the buffer below the
 * mark and resumes.
 */
function relay(
  from: WebSocket,
  to: WebSocket,
  bytes: number,
  write: (written: ((err?: Error | null) => void) | undefined) => void,
): void {
  if (to.bufferedAmount + bytes + FRAME_HEADER_BYTES <= RELAY_HIGH_WATER_BYTES) {
    write(undefined)
    return
  }
  write((err) => {
    if (!err && from.isPaused && to.bufferedAmount <= RELAY_HIGH_WATER_BYTES) from.resume()
  })
  if (to.bufferedAmount > RELAY_HIGH_WATER_BYTES) from.pause()
}

/** Longest a timer may wait (setTimeout's bound); a later deadline is looked at again then. */
const MAX_TIMER_MS = 2 ** 31 - 1

/** Who opened the socket, for the registry and for the checks that may end it. */
export interface SocketCredentials {
  readonly keyId: string | null
  readonly keyTenantId: string | null
  readonly actingTenantId: string | null
  /** The key's expiry (ms since the epoch), null for never. */
  readonly keyExpiresAt: number | null
  /**
   * The access token's `exp` (ms since the epoch); null for a key. Its requests are taken for the
   * 30 s leeway after it (clocks that differ); its sockets close at it (docs/api.md, WebSockets).
   */
  readonly tokenExpiresAt: number | null
  /**
   * The `kid` of the key that signed the access token; null for a key. A rotation with
   * `--compromised` withdraws it, and the socket closes with its token's requests.
   */
  readonly tokenKid: string | null
  /**
   * On a route with cells: the cell that serves the socket (null: placed nowhere, the route's own
   * upstream), the route's default cell, and the acting tenant's parent account (null: none). A
   * change of placement that moves the tenant elsewhere closes it (1012, revocation.ts).
   */
  readonly cell?: SocketCell | null
}

export interface SocketCell {
  readonly served: string | null
  readonly defaultCell: string | null
  readonly parentId: string | null
}

/** A code received in a close frame, as one that may be sent on: 1005 and 1006 are never sent. */
function relayable(code: number, vanished: number): number | undefined {
  if (code === 1005) return undefined
  if (code === 1006) return vanished
  return code
}

function closeIfOpen(socket: WebSocket, code: number | undefined, reason?: string | Buffer): void {
  if (socket.readyState === socket.OPEN || socket.readyState === socket.CONNECTING) socket.close(code, reason)
}

export class SocketPair implements TrackedSocket {
  readonly tenantIds: readonly string[]
  readonly keyId: string | null
  private readonly idleTimer: NodeJS.Timeout
  private expiryTimer: NodeJS.Timeout | null = null
  /** The key's expiry the timer was armed for: the sweep's check each second re-arms it only when it moved. */
  private armedKeyExpiry: number | null | undefined = undefined
  /** Set once the pair is over on the client's side: later events change nothing. */
  private ended = false

  readonly route: string
  private readonly client: WebSocket
  private readonly upstream: WebSocket
  readonly credentials: SocketCredentials
  /** Called once, when the client's socket has closed. */
  private readonly onClosed: (pair: SocketPair) => void
  constructor(
    route: string,
    client: WebSocket,
    upstream: WebSocket,
    credentials: SocketCredentials,
    options: RouteWebSocket,
    onClosed: (pair: SocketPair) => void,
  ) {
    this.route = route
    this.client = client
    this.upstream = upstream
    this.credentials = credentials
    this.onClosed = onClosed
    this.keyId = credentials.keyId
    // On a route with cells, the parent account too: a change of its default cell concerns the socket.
    const tenants = [credentials.actingTenantId, credentials.keyTenantId, credentials.cell?.parentId ?? null].filter(
      (id): id is string => id !== null,
    )
    this.tenantIds = [...new Set(tenants)]
    this.idleTimer = setTimeout(() => this.end(ENDINGS.idle), options.idleTimeoutMs)
    this.idleTimer.unref()
    this.scheduleExpiry(credentials.keyExpiresAt)

    const touch = () => this.idleTimer.refresh()
    client.on('message', (data: RawData, isBinary: boolean) => {
      touch()
      relay(client, upstream, sizeOf(data), (written) => upstream.send(data, { binary: isBinary }, written))
    })
    upstream.on('message', (data: RawData, isBinary: boolean) => {
      touch()
      relay(upstream, client, sizeOf(data), (written) => client.send(data, { binary: isBinary }, written))
    })
    client.on('ping', (data) => {
      touch()
      relay(client, upstream, data.length, (written) => upstream.ping(data, undefined, written))
    })
    client.on('pong', (data) => {
      touch()
      relay(client, upstream, data.length, (written) => upstream.pong(data, undefined, written))
    })
    upstream.on('ping', (data) => {
      touch()
      relay(upstream, client, data.length, (written) => client.ping(data, undefined, written))
    })
    upstream.on('pong', (data) => {
      touch()
      relay(upstream, client, data.length, (written) => client.pong(data, undefined, written))
    })
    // A message over the bound: ws has closed that side with 1009 already; the other side too.
    client.on('error', (err: Error & { code?: string }) => {
      if (err.code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH') closeIfOpen(upstream, 1009, ENDINGS.tooBig.reason)
    })
    upstream.on('error', (err: Error & { code?: string }) => {
      if (err.code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH') closeIfOpen(client, 1009, ENDINGS.tooBig.reason)
    })
    // A close passes to the other side with its code; an end that vanished (1006) is told as the
    // other end going away (to the upstream) or as a bad gateway (1014, to the client).
    // A side held back reads again, so that its close frame can be heard.
    upstream.on('close', (code, reason) => {
      client.resume()
      closeIfOpen(client, relayable(code, 1014), reason)
    })
    client.on('close', (code, reason) => {
      upstream.resume()
      closeIfOpen(upstream, relayable(code, 1001), reason)
      this.finish()
    })
  }

  /** Closes both sides with `ending` (revocation, expiry, idle, shutdown). */
  end(ending: Ending): void {
    if (this.ended) return
    this.client.resume()
    this.upstream.resume()
    closeIfOpen(this.client, ending.code, ending.reason)
    closeIfOpen(this.upstream, ending.code, ending.reason)
  }

  /** Both sockets cut at once: an end that did not answer a close in time. */
  terminate(): void {
    this.client.terminate()
    this.upstream.terminate()
  }

  /**
   * (Re)arms the timer of the credentials' end: the key's expiry (it may have been shortened by a
   * roll) or the access token's, whichever comes first.
   */
  scheduleExpiry(keyExpiresAt: number | null): void {
    if (this.ended || keyExpiresAt === this.armedKeyExpiry) return
    this.armedKeyExpiry = keyExpiresAt
    if (this.expiryTimer !== null) clearTimeout(this.expiryTimer)
    this.expiryTimer = null
    const tokenEnd = this.credentials.tokenExpiresAt
    const tokenFirst = tokenEnd !== null && (keyExpiresAt === null || tokenEnd <= keyExpiresAt)
    const at = tokenFirst ? tokenEnd : keyExpiresAt
    if (at === null) return
    const wait = at - Date.now()
    if (wait > MAX_TIMER_MS) {
      this.expiryTimer = setTimeout(() => {
        this.armedKeyExpiry = undefined
        this.scheduleExpiry(keyExpiresAt)
      }, MAX_TIMER_MS)
    } else {
      // Past already (a token used in its leeway): at once, without Node's negative-delay warning.
      this.expiryTimer = setTimeout(
        () => this.end(tokenFirst ? ENDINGS.tokenExpired : ENDINGS.revoked),
        Math.max(0, wait),
      )
    }
    this.expiryTimer.unref()
  }

  private finish(): void {
    if (this.ended) return
    this.ended = true
    clearTimeout(this.idleTimer)
    if (this.expiryTimer !== null) clearTimeout(this.expiryTimer)
    this.onClosed(this)
  }
}
