// An upstream's answer that comes before it read the whole request body (a 413, a 401, a
// redirect), and then a close with the rest of the body unread: the upstream's kernel answers the
// bytes still coming with a reset, and the gateway's next write of the body fails (ECONNRESET,
// EPIPE). Node marks both sides of a socket errored on a failed write, and destroys it at once,
// with it the answer that had come but was not read yet: undici then reported the write's error,
// and the client got a 502 for what was a 413 (2–4 times in 5 on an 8 MB upload; every time when
// the answer and the reset come together). So on each upstream socket (interim-answers.ts's
// connector) such a failed write is not reported: the body stops there (the write never
// completes, and undici sends no more), and the reading goes on, undici taking the answer that
// came. The read side's end or error then ends the socket, the write's error given if nothing
// else was.
import type { Socket } from 'node:net'

/** The errors of a write to a connection the other side has reset or closed. */
const PEER_GONE = new Set(['ECONNRESET', 'EPIPE'])

type WriteCallback = (error?: Error | null) => void

interface Writes {
  _write(chunk: unknown, encoding: BufferEncoding, callback: WriteCallback): void
  _writev?(chunks: unknown[], callback: WriteCallback): void
}

/** Whether `error` is that of a write to a peer that reset or closed the connection. */
function isPeerGone(error: Error | null | undefined): error is NodeJS.ErrnoException {
  const code = (error as NodeJS.ErrnoException | null | undefined)?.code
  return code !== undefined && PEER_GONE.has(code)
}

/**
 * Makes `socket` read on past a failed write: a write that fails with ECONNRESET or EPIPE never
 * completes (the body stops), and the socket is destroyed with that error when its read side
 * ends, unless undici ended it first. Any other write error is reported as before.
 */
export function readPastWriteErrors(socket: Socket): void {
  const writes = socket as unknown as Writes
  let failed: Error | null = null
  const held = (callback: WriteCallback) => (error?: Error | null) => {
    if (!isPeerGone(error)) return callback(error)
    if (failed !== null) return
    failed = error
    socket.once('end', () => socket.destroy(failed!))
  }
  const write = writes._write
  writes._write = function writeHeld(this: Socket, chunk, encoding, callback) {
    write.call(this, chunk, encoding, held(callback))
  }
  const writev = writes._writev
  if (writev !== undefined)
    writes._writev = function writevHeld(this: Socket, chunks, callback) {
      writev.call(this, chunks, held(callback))
    }
}
