// Requests Node's HTTP parser refuses (a head over 16 KiB, bad framing, a bare LF…), and CONNECT,
// which Node hands to no route, never reach fastify's routing: they are answered here, on the
// socket, in the same problem+json envelope as every other error (docs/api.md), and the
// connection is closed (its framing can no longer be trusted). Fastify's clientErrorHandler, and
// the server's 'connect' listener.
import { randomUUID } from 'node:crypto'
import { type Server, STATUS_CODES } from 'node:http'
import type { Duplex } from 'node:stream'
import type { FastifyInstance } from 'fastify'
import { ERRORS, problem, PROBLEM_CONTENT_TYPE, type ErrorCode } from '../errors.js'
import { HEADERS_TOO_LARGE } from './header-counts.js'
import { codingRefusedBefore, isUndecodedCodingRefusal, UNDECODED_CODING } from './transfer-coding.js'

export function refuseClientError(this: FastifyInstance, err: NodeJS.ErrnoException, socket: Duplex): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return
  // Refused by guards.ts already, its answer closing the connection once written.
  if (isUndecodedCodingRefusal(err) && codingRefusedBefore(socket)) return
  const code: ErrorCode =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? 'headers_too_large'
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? 'request_timeout'
        : isUndecodedCodingRefusal(err)
          ? 'not_implemented'
          : 'bad_request'
  const detail =
    code === 'headers_too_large'
      ? HEADERS_TOO_LARGE
      : code === 'request_timeout'
        ? 'the request was not received in time'
        : code === 'not_implemented'
          ? UNDECODED_CODING
          : 'the request is not valid HTTP/1.1'
  const requestId = randomUUID()
  this.log.debug({ err, reqId: requestId }, 'refused by the HTTP parser')
  if (socket.writable) socket.write(answerBytes(code, detail, requestId))
  socket.destroy(err)
}

/** A problem+json answer that closes its connection, as bytes for a socket no route serves. */
function answerBytes(code: ErrorCode, detail: string, requestId: string): string {
  const body = JSON.stringify(problem(code, detail, requestId))
  const status = ERRORS[code].status
  return (
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: ${PROBLEM_CONTENT_TYPE}\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\nX-Request-Id: ${requestId}\r\nConnection: close\r\n\r\n${body}`
  )
}

/**
 * CONNECT asks for a tunnel to `host:port`, a target that is not a path: `400 bad_path`, as for
 * `*` or an absolute URI. Node hands it to 'connect' listeners, not to fastify, and with none it
 * closes the connection without a word.
 */
export function refuseConnect(server: Server): void {
  server.on('connect', (_request, socket: Duplex) => {
    // Nothing else listens to this socket now: its errors (a client gone) end here.
    socket.on('error', () => {})
    const detail =
      'CONNECT is not served: the gateway proxies paths, not tunnels; send a request whose target is a path'
    socket.end(answerBytes('bad_path', detail, randomUUID()), () => socket.destroy())
  })
}
