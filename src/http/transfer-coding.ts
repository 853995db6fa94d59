// The request transfer codings the gateway decodes (docs/api.md, "Before routing"): `chunked`
// alone. Anything else (`gzip, chunked`, an unknown coding, `identity`) is `501 not_implemented`
// (RFC 9112 §6.1), on every path, before a byte of the body is read or forwarded: the body of
// `gzip, chunked` would otherwise reach an upstream as if plain, its compression dropped with the
// header (proxy/headers.ts sets the body's framing itself).
import { ApiError } from '../errors.js'

export const UNDECODED_CODING =
  'the gateway decodes no transfer coding but chunked: send Transfer-Encoding: chunked alone, or a Content-Length (a compressed body says so in Content-Encoding)'

/**
 * The reasons Node's parser (llhttp) gives a Transfer-Encoding whose last coding is not `chunked`:
 * the first for `identity`, `gzip` or `chunked;x=1` alone, after it has handed the request's head
 * over (guards.ts refuses it then too), the second for `chunked, gzip` or `chunked, chunked`,
 * before. Not the one of a Transfer-Encoding beside a Content-Length: ambiguous framing, a 400.
 */
const PARSER_REASONS: ReadonlySet<string> = new Set([
  'Request has invalid `Transfer-Encoding`',
  'Invalid `Transfer-Encoding` header value',
])

/** Sockets whose request guards.ts has refused for its coding: their answer is on its way. */
const refusedBeforeRouting = new WeakSet<object>()

/**
 * Whether a request's Transfer-Encoding (as Node gives it: repeated fields joined by `, `, blanks
 * around the value trimmed) names anything but `chunked` alone. Coding names are case-insensitive
 * (RFC 9112 §7).
 */
export function undecodedCoding(transferEncoding: string | undefined): boolean {
  return transferEncoding !== undefined && transferEncoding.toLowerCase() !== 'chunked'
}

/** Whether a refusal of Node's parser is that of a transfer coding it cannot decode. */
export function isUndecodedCodingRefusal(err: NodeJS.ErrnoException & { reason?: string }): boolean {
  return err.code === 'HPE_INVALID_TRANSFER_ENCODING' && err.reason !== undefined && PARSER_REASONS.has(err.reason)
}

/** The refusal of a request on `socket` for its coding; the socket is marked as answered. */
export function undecodedCodingRefusal(socket: object): ApiError {
  refusedBeforeRouting.add(socket)
  return new ApiError('not_implemented', UNDECODED_CODING)
}

/**
 * Whether the request on `socket` was refused for its coding already: the parser's own refusal
 * of it, which comes once its head was handed over, writes no second answer.
 */
export function codingRefusedBefore(socket: object): boolean {
  return refusedBeforeRouting.has(socket)
}
