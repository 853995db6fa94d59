// Access tokens in tests (docs/credentials.md): a sub-account key with its client secret, made
// through the management API, and token requests sent as an OAuth client sends them.
import { type RawResponse, callAs, rawRequest } from './http.js'

export interface ClientKey {
  parentId: string
  parentKey: string
  subId: string
  /** The key's id: the client_id. */
  keyId: string
  apiKey: string
  clientSecret: string
  scopes: string[]
}

/** A parent (made with `createParent`), a sub-account of it and a key of that, through the API at `url`. */
export async function clientKey(
  url: string,
  parent: { id: string; apiKey: string },
  scopes: string[] = ['orders:read', 'orders:write'],
): Promise<ClientKey> {
  const manage = async (path: string, json: unknown) => {
    const res = await callAs(url, parent.apiKey, {
      method: 'POST',
      path: `/v1/sub-accounts${path}`,
      acting: 'self',
      json,
    })
    if (res.status !== 201) throw new Error(`POST ${path}: ${res.status} ${res.body}`)
    return res.json()
  }
  const sub = await manage('', { name: 'token client' })
  const key = await manage(`/${sub.id}/api-keys`, { name: 'machine', scopes })
  return {
    parentId: parent.id,
    parentKey: parent.apiKey,
    subId: sub.id,
    keyId: key.id,
    apiKey: key.api_key,
    clientSecret: key.client_secret,
    scopes,
  }
}

/** RFC 6749 §2.3.1: each part form-urlencoded (Appendix B), then joined by ':' and base64-encoded. */
export function basicAuthorization(id: string, secret: string, encode = formEncode): string {
  return `Basic ${Buffer.from(`${encode(id)}:${encode(secret)}`).toString('base64')}`
}

/** application/x-www-form-urlencoded as RFC 6749 Appendix B says (space as +). */
export const formEncode = (value: string) => new URLSearchParams({ v: value }).toString().slice(2)

export interface TokenRequest {
  /** The body as sent; an object is form-encoded. */
  form?: Record<string, string> | string | Buffer
  contentType?: string | null
  headers?: [string, string][]
  path?: string
  method?: string
  /** The loopback address to connect from (rawRequest). */
  localAddress?: string
}

/** POST /oauth2/token over a real socket. */
export function tokenRequest(url: string, request: TokenRequest = {}): Promise<RawResponse> {
  const body =
    request.form === undefined
      ? undefined
      : typeof request.form === 'string' || Buffer.isBuffer(request.form)
        ? request.form
        : new URLSearchParams(request.form).toString()
  const headers: [string, string][] = []
  const type = request.contentType === undefined ? 'application/x-www-form-urlencoded' : request.contentType
  if (type !== null && body !== undefined) headers.push(['Content-Type', type])
  headers.push(['Content-Length', String(body === undefined ? 0 : Buffer.byteLength(body))])
  headers.push(...(request.headers ?? []))
  return rawRequest(url, {
    method: request.method ?? 'POST',
    path: request.path ?? '/oauth2/token',
    headers,
    body,
    ...(request.localAddress === undefined ? {} : { localAddress: request.localAddress }),
  })
}

/** A token for `client` by client_secret_post; throws unless the endpoint answers 200. */
export async function accessToken(url: string, client: ClientKey, scope?: string): Promise<string> {
  const res = await tokenRequest(url, {
    form: {
      grant_type: 'client_credentials',
      client_id: client.keyId,
      client_secret: client.clientSecret,
      ...(scope === undefined ? {} : { scope }),
    },
  })
  if (res.status !== 200) throw new Error(`token: ${res.status} ${res.body}`)
  return res.json().access_token as string
}
