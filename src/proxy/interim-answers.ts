// An upstream's informational answers before its final one (RFC 9110 §15.2): not an error, the
// client gets the final answer (upstream-call.ts passes none of them on). undici would get them
// wrong two ways: it takes an unsolicited `100 Continue` for a broken connection, which would be a
// 502 (the gateway never asks for one: the upstream never sees Expect, yet an upstream may send
// it); and each other 1xx it reads refreshes its headers timeout, so an upstream sending a 102 or
// 103 every so often, and never a final answer, held its request past the route's `timeout_ms` for
// as long as it liked. So each route's pool connects through `interimAnswersConnector`: on each
// upstream socket, from the moment a request's head is sent until its answer's final status line
// has come, every informational head found where an answer begins (but a 101) is dropped before
// undici parses it. Once the final status line is seen, the bytes go to undici untouched until the
// next request: one look per answer.
import { subscribe } from 'node:diagnostics_channel'
import type { Socket } from 'node:net'
import { buildConnector } from 'undici'
import { readPastWriteErrors } from './early-answers.js'

/** `HTTP/1.1 200`: what tells an answer's status. */
const STATUS_LINE_BYTES = 12
const HTTP_1 = Buffer.from('HTTP/1.')
const HEAD_END = Buffer.from('\r\n\r\n')
/**
 * An informational head held longer than this ends the connection (a 502): undici, which counts
 * only the fields' bytes against its 16 KiB, could take one a little longer, and every answer it
 * takes would start its headers timeout again.
 */
const MAX_HEAD_BYTES = 16 * 1024
const DIGIT_0 = 0x30

const WATCH = Symbol('interim answers')

interface WatchedSocket extends Socket {
  [WATCH]?: InterimAnswers
}

/** One upstream socket's answers, as undici reads them. Exported for its unit test. */
export class InterimAnswers {
  /** A request's head went out, and its answer's final status line has not come yet. */
  awaitingStatus = false
  /** An informational head longer than MAX_HEAD_BYTES came: nothing more is to be read. */
  tooLong = false
  /** The start of an answer's head, not whole yet. */
  private held: Buffer | null = null

  /**
   * What undici is to read of `chunk` (null: what the socket read last) and of what was held
   * before it: the same bytes less each informational head but a 101 that begins an answer, or
   * null when nothing is left to read yet.
   */
  pass(chunk: Buffer | null): Buffer | null {
    let data = chunk
    if (this.held !== null) {
      data = chunk === null ? this.held : Buffer.concat([this.held, chunk])
      this.held = null
    }
    if (data === null) return null
    let kept: Buffer[] | null = null
    let at = 0
    while (this.awaitingStatus && at < data.length) {
      const status = statusAt(data, at)
      if (status === 'partial') {
        this.held = data.subarray(at)
        return joined(kept, null)
      }
      // Not an answer, or a final one: undici's to read, and to judge.
      if (status === null || status < 100 || status > 199) {
        this.awaitingStatus = false
        break
      }
      const end = data.indexOf(HEAD_END, at + STATUS_LINE_BYTES)
      if (end === -1) {
        if (data.length - at > MAX_HEAD_BYTES) {
          this.awaitingStatus = false
          this.tooLong = true
          return null
        }
        this.held = data.subarray(at)
        return joined(kept, null)
      }
      // An informational answer has no content: it ends with its head.
      const next = end + HEAD_END.length
      // 101: what follows is another protocol's, not answers.
      if (status === 101) {
        kept ??= []
        kept.push(data.subarray(at, next))
        this.awaitingStatus = false
      }
      at = next
    }
    return joined(kept, at === 0 ? data : data.subarray(at))
  }
}

/** The status an answer starting at `at` gives; 'partial' when too few bytes came to tell; null: not an answer. */
function statusAt(data: Buffer, at: number): number | 'partial' | null {
  const available = Math.min(data.length - at, STATUS_LINE_BYTES)
  const prefix = Math.min(available, HTTP_1.length)
  if (data.compare(HTTP_1, 0, prefix, at, at + prefix) !== 0) return null
  if (available < STATUS_LINE_BYTES) return 'partial'
  // `HTTP/1.x NNN`
  if (data[at + 8] !== 0x20) return null
  let status = 0
  for (let i = at + 9; i < at + 12; i++) {
    const digit = data[i]! - DIGIT_0
    if (digit < 0 || digit > 9) return null
    status = status * 10 + digit
  }
  return status
}

function joined(kept: Buffer[] | null, rest: Buffer | null): Buffer | null {
  if (kept === null) return rest === null || rest.length === 0 ? null : rest
  if (rest !== null && rest.length > 0) kept.push(rest)
  return Buffer.concat(kept)
}

/** undici reads a socket's answers with read(), between 'readable' events: they pass through here first. */
function watch(socket: WatchedSocket): void {
  const answers = new InterimAnswers()
  socket[WATCH] = answers
  const read = socket.read
  socket.read = function readPastContinue(this: Socket, size?: number) {
    let chunk = read.call(this, size) as Buffer | null
    if (!answers.awaitingStatus) return chunk
    for (;;) {
      const passed = answers.pass(chunk)
      if (answers.tooLong) {
        this.destroy(new Error("an upstream's informational answer has a head of more than 16 KiB"))
        return null
      }
      // Nothing to give undici yet: read on, until the socket has nothing more for now.
      if (passed !== null || chunk === null) return passed
      chunk = read.call(this, size) as Buffer | null
    }
  }
}

// undici publishes each request's head as it writes it, with its socket: the answer that follows
// is that request's. A socket of any other client has no watch, and costs a property read.
subscribe('undici:client:sendHeaders', (message) => {
  const answers = (message as { socket: WatchedSocket }).socket[WATCH]
  if (answers !== undefined) answers.awaitingStatus = true
})

/**
 * undici's connector with `options`, whose sockets pass an upstream's informational answers by,
 * and read an early answer past a failed write of the request body (early-answers.ts).
 */
export function interimAnswersConnector(options: buildConnector.BuildOptions): buildConnector.connector {
  const connect = buildConnector(options)
  return (target, callback) =>
    connect(target, (error, socket) => {
      // A failed connection gives its error alone.
      if (error === null) {
        watch(socket)
        readPastWriteErrors(socket)
      }
      ;(callback as (error: Error | null, socket: Socket | null) => void)(error, socket)
    })
}
