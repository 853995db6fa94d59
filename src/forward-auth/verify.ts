// POST /verify on AUTHZ_PORT (docs/api.md, Verifying a key): a service behind no proxy asks
// about a key, as whom, and for which request, in a JSON body. The body is read here (bounded)
// and checked field by field; the decision itself is the proxy's, through the app's router, as
// a request with that key, acting header, method and path (listener.ts).
import type { IncomingMessage } from 'node:http'
import { ApiError, type FieldError, payloadTooLarge, validationFailed } from '../errors.js'

/** A /verify body past this is refused (413): a key, a tenant, a method and a path fit in far less. */
export const VERIFY_BODY_LIMIT = 16 * 1024

/** What /verify is asked (docs/api.md). */
export interface VerifyQuestion {
  readonly key: string
  readonly actingTenant: string | null
  /** Default GET. */
  readonly method: string
  /** Path and query; default `/`. */
  readonly path: string
  /** Request units; null: the route's `cost`. */
  readonly cost: number | null
}

const FIELDS = new Set(['key', 'acting_tenant', 'method', 'path', 'cost'])
const METHOD = /^[A-Z]{1,32}$/
const MAX_COST = 1_000_000

/** The body, as text, once it has all come; a 413 past the limit. */
export function readBody(raw: IncomingMessage): Promise<string | ApiError> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    const onData = (chunk: Buffer) => {
      size += chunk.length
      if (size > VERIFY_BODY_LIMIT) {
        raw.off('data', onData)
        // Read the rest into nothing: the answer goes out on a connection still in step.
        raw.resume()
        resolve(payloadTooLarge(VERIFY_BODY_LIMIT))
        return
      }
      chunks.push(chunk)
    }
    raw.on('data', onData)
    raw.once('end', () => resolve(Buffer.concat(chunks).toString('utf8')))
    raw.once('error', reject)
    // A caller that leaves before its body has all come: nothing to answer, nothing left waiting.
    raw.once('close', () => {
      if (!raw.complete) resolve(new ApiError('bad_request', 'the connection closed before the whole body came'))
    })
  })
}

/** The question in `text`, or the 400 naming each field that is wrong. */
export function verifyQuestion(text: string): VerifyQuestion | ApiError {
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    return new ApiError('invalid_json', 'the body is not JSON: send {"key": "<api key>", ...}')
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    return validationFailed([{ path: '', message: 'must be an object with "key"' }])
  const fields = body as Record<string, unknown>
  const errors: FieldError[] = []
  for (const name of Object.keys(fields))
    if (!FIELDS.has(name)) errors.push({ path: `/${name}`, message: 'is not a field of /verify' })
  const { key, acting_tenant: acting, method, path, cost } = fields
  if (typeof key !== 'string' || key === '')
    errors.push({ path: '/key', message: 'must be the API key or access token, a string' })
  if (acting !== undefined && acting !== null && typeof acting !== 'string')
    errors.push({ path: '/acting_tenant', message: 'must be a string: self, a sub-account id, or ext:<external_id>' })
  if (method !== undefined && (typeof method !== 'string' || !METHOD.test(method)))
    errors.push({ path: '/method', message: 'must be an HTTP method in capitals, as GET or POST' })
  if (path !== undefined && (typeof path !== 'string' || !path.startsWith('/')))
    errors.push({ path: '/path', message: 'must be the request path (and query), starting with /' })
  if (cost !== undefined && (!Number.isInteger(cost) || (cost as number) < 1 || (cost as number) > MAX_COST))
    errors.push({ path: '/cost', message: `must be a whole number from 1 to ${MAX_COST}` })
  if (errors.length > 0) return validationFailed(errors)
  return {
    key: key as string,
    actingTenant: typeof acting === 'string' ? acting : null,
    method: (method as string | undefined) ?? 'GET',
    path: (path as string | undefined) ?? '/',
    cost: (cost as number | undefined) ?? null,
  }
}
