// Who a token request says it is (RFC 6749 §2.3.1): HTTP Basic (client_secret_basic) or the form's
// client_id and client_secret (client_secret_post), never both. The client id is the key's id; the
// secret is the key's client secret (docs/credentials.md).
import { invalidClient, invalidRequest } from './errors.js'
import type { TokenForm } from './token-form.js'

export interface PresentedClient {
  /** As sent (percent-decoded for Basic). */
  readonly id: string
  /** Null when none was sent: such a client fails authentication like a wrong secret. */
  readonly secret: string | null
  readonly method: 'client_secret_basic' | 'client_secret_post'
}

const utf8 = new TextDecoder('utf-8', { fatal: true })
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/

/**
 * RFC 6749 §2.3.1: the id and the secret are form-urlencoded (Appendix B) before they are joined
 * with `:` and base64-encoded, so a `:` or a non-ASCII character inside either survives.
 */
function formDecoded(part: string): string {
  try {
    return decodeURIComponent(part.replaceAll('+', ' '))
  } catch {
    throw invalidRequest('the Basic credentials are not form-urlencoded')
  }
}

/** `Basic <base64(urlencode(id):urlencode(secret))>`; null for another scheme. */
function basicCredentials(authorization: string): { id: string; secret: string } | null {
  const match = /^basic +(\S*) *$/i.exec(authorization)
  if (match === null) return null
  const encoded = match[1]!
  if (encoded.length % 4 !== 0 || !BASE64.test(encoded)) throw invalidRequest('the Basic credentials are not base64')
  let decoded: string
  try {
    decoded = utf8.decode(Buffer.from(encoded, 'base64'))
  } catch {
    throw invalidRequest('the Basic credentials are not UTF-8')
  }
  const colon = decoded.indexOf(':')
  if (colon === -1) throw invalidRequest("the Basic credentials have no ':' between client id and secret")
  return { id: formDecoded(decoded.slice(0, colon)), secret: formDecoded(decoded.slice(colon + 1)) }
}

/**
 * The client a request presents, or throws: 400 invalid_request for a malformed or twofold
 * authentication, 401 invalid_client when there is none (or another scheme than Basic).
 * `authorizationCount` is how many Authorization headers came (Node keeps the first only).
 */
export function presentedClient(
  authorization: string | undefined,
  authorizationCount: number,
  form: TokenForm,
): PresentedClient {
  if (authorizationCount > 1) throw invalidRequest('send one Authorization header')
  const formId = form.client_id || undefined
  const formSecret = form.client_secret || undefined
  if (authorization !== undefined && authorization !== '') {
    const basic = basicCredentials(authorization)
    if (basic === null) throw invalidClient('authenticate with HTTP Basic, or client_id and client_secret in the form')
    // RFC 6749 §2.3: one method per request. A form client_id that repeats the Basic one is not a
    // second method (some libraries send it); a different one is a contradiction.
    if (formSecret !== undefined || (formId !== undefined && formId !== basic.id))
      throw invalidRequest('authenticate one way: HTTP Basic or client_id and client_secret in the form, not both')
    return { id: basic.id, secret: basic.secret, method: 'client_secret_basic' }
  }
  if (formId === undefined)
    throw invalidClient('client authentication is required: HTTP Basic or client_id and client_secret')
  return { id: formId, secret: formSecret ?? null, method: 'client_secret_post' }
}
