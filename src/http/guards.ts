// What every request goes through before routing decides anything (docs/api.md): its request id
// on the answer (request-id.ts makes it), an upgrade's Connection: close, the bad-path refusal, no
// transfer coding but chunked (transfer-coding.ts), at most 100 header fields and 16 KiB of them,
// the one-Host rule, a Host that is a host[:port], and the 404, all before authentication and
// before a body parser can answer 415 or 400. Management paths included. And, on the way out,
// X-Content-Type-Options: nosniff on every answer the gateway writes itself (never a proxied one).
import fp from 'fastify-plugin'
import { ApiError, routeNotFound } from '../errors.js'
import { isBadPath, pathOf } from './bad-paths.js'
import { isUpgrade } from './upgrade-request.js'
import { closesBeforeBodyEnds, isLingering } from './lingering-close.js'
import { closeWithConnection } from './queued-answer.js'
import { HEADERS_TOO_LARGE, MAX_HEADER_BYTES, MAX_HEADER_FIELDS, singleHeaderCounts } from './header-counts.js'
import { undecodedCoding, undecodedCodingRefusal } from './transfer-coding.js'

/**
 * RFC 9110 §7.2: Host = uri-host [ ":" port ], where uri-host is an IP literal in brackets or a
 * reg-name of unreserved, sub-delims and percent-encodings (RFC 3986 §3.2.2), not empty (RFC 9110
 * §4.2.1), and the port one of 0–65535. Anything else (`evil/v1/sub-accounts?a`, `:80`, `a%zz`,
 * `a:99999`) would reach the upstream as X-Forwarded-Host.
 */
const VALID_HOST =
  /^(?:\[[0-9A-Fa-f:.]+\]|(?:[A-Za-z0-9._~!$&'()*+,;=-]|%[0-9A-Fa-f]{2})+)(?::0*(?:[0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?$/

export const requestGuards = fp(
  async (app) => {
    app.decorateRequest('singleHeaders', null)

    app.addHook('onRequest', (request, reply, done) => {
      // Sent after a body whose connection is closing (lingering-close.ts): not served at all.
      if (isLingering(request.raw.socket)) {
        reply.hijack()
        request.raw.socket.destroy()
        return
      }
      // A pipelined request's answer, queued behind another, says 'close' if its connection goes first.
      closeWithConnection(reply.raw, request.raw.socket)
      // Every response carries the request id, errors included (they keep the headers set here).
      reply.header('x-request-id', request.id)
      // http-proxy ends an upgrade's socket after any answer but a 101: the answer says so.
      if (isUpgrade(request.raw)) reply.raw.shouldKeepAlive = false
      if (isBadPath(pathOf(request.url))) {
        done(
          new ApiError(
            'bad_path',
            'the path may not contain .., //, ;, #, a control character, or an encoded dot pair, slash, backslash, ; or #, also when decoded again: encode the path once, without such parts',
          ),
        )
        return
      }
      // RFC 9112 §6.1: a coding the gateway cannot decode (`gzip, chunked`) is a 501, its body
      // unread, and its connection closed (lingering while the body still comes): Node's parser
      // may refuse the same request once its head is handed over (transfer-coding.ts).
      if (undecodedCoding(request.headers['transfer-encoding'])) {
        closesBeforeBodyEnds(request.raw)
        reply.header('connection', 'close')
        done(undecodedCodingRefusal(request.raw.socket))
        return
      }
      const counts = singleHeaderCounts(request)
      // Past these, an upstream may drop headers (a Node one keeps its first 2,000 fields): the
      // gateway's own, written first, would survive, but a limit every hop agrees on is simpler.
      if (counts.fields > MAX_HEADER_FIELDS || counts.bytes > MAX_HEADER_BYTES) {
        done(new ApiError('headers_too_large', HEADERS_TOO_LARGE))
        return
      }
      // RFC 9112 §3.2: a request with more than one Host is a 400 (Node keeps the first silently,
      // and X-Forwarded-Host would name it while an upstream might read another).
      if (counts.host > 1) {
        done(new ApiError('bad_request', 'send one Host header'))
        return
      }
      const host = request.headers.host
      // RFC 9112 §3.2: an HTTP/1.1 request without Host is a 400 (HTTP/1.0 may leave it out).
      if (host === undefined && request.raw.httpVersionMinor !== 0) {
        done(new ApiError('bad_request', 'send a Host header: HTTP/1.1 requires one'))
        return
      }
      if (host !== undefined && !VALID_HOST.test(host)) {
        done(new ApiError('bad_request', 'the Host header must be a host name or address, with an optional port'))
        return
      }
      // Fastify parses the body for its 404 handler too: answer before a parser can say 415 or 400.
      if (request.is404) {
        done(routeNotFound(request.method, pathOf(request.url)))
        return
      }
      done()
    })

    // Every answer the gateway writes itself (management, the portal's API, the token endpoint,
    // the ops paths, every refusal) is to be read as the type it says, never sniffed into a
    // script or a page. A proxied answer never comes here: upstream-call.ts writes it after
    // reply.hijack(), its headers the upstream's, and its hot path pays nothing for this.
    app.addHook('onSend', (_request, reply, payload, done) => {
      reply.header('x-content-type-options', 'nosniff')
      done(null, payload)
    })

    app.setNotFoundHandler((request) => {
      throw routeNotFound(request.method, pathOf(request.url))
    })
  },
  { name: 'request-guards' },
)
