// What an idempotent request is made of (docs/api.md, Idempotency): its Idempotency-Key header,
// read and checked, and its fingerprint, a SHA-256 of the method, the path and the raw body, taken
// as the body streams to the JSON parser (no copy of it is kept).
import { createHash, type Hash } from 'node:crypto'
import { Transform } from 'node:stream'
import type { FastifyRequest } from 'fastify'
import { validationFailed } from '../errors.js'

export const IDEMPOTENCY_HEADER = 'idempotency-key'
export const REPLAYED_HEADER = 'idempotent-replayed'

/** 1 to 255 printable ASCII characters (space to tilde). */
const IDEMPOTENCY_KEY_PATTERN = /^[\x20-\x7e]{1,255}$/

/** The methods whose requests take an Idempotency-Key; on others the header is ignored. */
export const IDEMPOTENT_METHODS: ReadonlySet<string> = new Set(['POST', 'PATCH'])

const headerError = (message: string) => validationFailed([{ path: `/headers/${IDEMPOTENCY_HEADER}`, message }])

/**
 * The request's Idempotency-Key, or null when it has none. Sent more than once (Node would fold
 * the values into one, joined by ", "), empty, too long or not printable ASCII: 400.
 */
export function idempotencyKeyOf(request: FastifyRequest): string | null {
  const raw = request.raw.rawHeaders
  let count = 0
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i]!.length === IDEMPOTENCY_HEADER.length && raw[i]!.toLowerCase() === IDEMPOTENCY_HEADER) count++
  }
  if (count === 0) return null
  if (count > 1) throw headerError('must be sent once')
  const value = request.headers[IDEMPOTENCY_HEADER]
  if (typeof value !== 'string' || !IDEMPOTENCY_KEY_PATTERN.test(value)) {
    throw headerError('must be 1 to 255 printable ASCII characters')
  }
  return value
}

/**
 * A request's fingerprint in the making: the method and the path (as sent, query included) now, the
 * body's bytes as they pass. Two requests are the same when their bytes are: a body sent again with
 * other spacing or member order is another body
 * (docs/decisions/0148-compared-by-the-raw-bodys-bytes.md).
 */
export class Fingerprint {
  private readonly hash: Hash

  constructor(method: string, url: string) {
    this.hash = createHash('sha256').update(`${method} ${url}\n`)
  }

  /** The body stream, passed through unchanged while its bytes are hashed. */
  tap(payload: NodeJS.ReadableStream): Transform {
    const hash = this.hash
    const tapped = new Transform({
      transform(chunk: Buffer, _encoding, callback) {
        hash.update(chunk)
        callback(null, chunk)
      },
    })
    tapped.on('error', () => {}) // the parser hears it; nothing else must
    payload.on('error', (err) => tapped.destroy(err))
    payload.pipe(tapped)
    return tapped
  }

  digest(): Buffer {
    return this.hash.digest()
  }
}
