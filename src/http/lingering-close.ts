// An answer sent before the request's body was read whole ends its connection (the rest of the
// body can carry no other request). Closed at once, a socket with bytes still coming answers them
// with a reset, and a client's TCP stack that gets the reset before its program read the answer
// throws the answer away: the client sees "connection reset", not the 502 it was sent. So the
// gateway closes its side, then reads and drops what still comes for a while (nginx's lingering
// close), and lets go of the socket when the client closes or after LINGER_MS at most. A request
// the client sent after that body is never served (guards.ts ends the connection on it): its
// answer could not be written, and serving it would do its work unseen.
import type { IncomingMessage } from 'node:http'
import type { Socket } from 'node:net'

export const LINGER_MS = 2_000

/** Sockets in their lingering close: what still comes is read and dropped, never served. */
const lingering = new WeakSet<Socket>()

export function isLingering(socket: Socket | null): boolean {
  return socket !== null && lingering.has(socket)
}

/**
 * Whether the answer about to start must close the connection because the request's body was not
 * read whole; if so, the close is made lingering here, so that the header and its manner go together.
 */
export function closesBeforeBodyEnds(request: IncomingMessage): boolean {
  if (request.complete) return false
  lingerAfterAnswer(request)
  return true
}

/** Makes the close that follows this request's answer a lingering one. */
export function lingerAfterAnswer(request: IncomingMessage): void {
  const socket = request.socket as Socket | null
  if (socket === null || socket.destroyed) return
  // Node's server closes a connection whose answer said `Connection: close` with destroySoon.
  socket.destroySoon = function lingeringClose(this: Socket): void {
    lingering.add(this)
    if (this.writable) this.end()
    const timer = setTimeout(() => this.destroy(), LINGER_MS)
    this.once('close', () => clearTimeout(timer))
    // The rest of the body, read and dropped as the parser hands it over.
    request.resume()
  }
}
