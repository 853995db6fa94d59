// A raw HTTP client for the gateway over real sockets: it sends headers and paths exactly as
// written (fetch would normalise both), on a fresh connection or over a keep-alive agent.
import { createHash } from 'node:crypto'
import { request as httpRequest, type Agent, type IncomingHttpHeaders } from 'node:http'
import type { JsonBody } from './json.js'

export interface RawResponse {
  status: number
  headers: IncomingHttpHeaders
  /** The trailers of a chunked answer (empty for any other). */
  trailers?: NodeJS.Dict<string>
  body: string
  json(): JsonBody
}

export interface RawRequest {
  method?: string
  /** Sent exactly as written: no normalisation of dots, slashes or encodings. */
  path: string
  /** Name/value pairs, sent in this order and case; a name may repeat. */
  headers?: [string, string][]
  body?: string | Buffer
  /** The loopback address to connect from (127.0.0.2…), so that the gateway sees another client. */
  localAddress?: string
  /** Send no Host header at all (else one is added unless `headers` has it). */
  withoutHost?: boolean
}

/** One request over a fresh connection, with headers and path exactly as given. */
export function rawRequest(baseUrl: string, options: RawRequest): Promise<RawResponse> {
  const url = new URL(baseUrl)
  const flat: string[] = []
  const given = options.headers ?? []
  // Node adds no Host header when headers are given as a list: add one unless the test did.
  if (!options.withoutHost && !given.some(([name]) => name.toLowerCase() === 'host')) flat.push('Host', url.host)
  for (const [name, value] of given) flat.push(name, value)
  return new Promise((resolve, reject) => {
    const request = httpRequest(
      {
        // An IPv6 literal's brackets are the URL's, not the address's.
        host: url.hostname.replace(/^\[(.*)\]$/, '$1'),
        port: url.port,
        method: options.method ?? 'GET',
        path: options.path,
        headers: flat,
        agent: false,
        ...(options.localAddress === undefined ? {} : { localAddress: options.localAddress }),
      },
      (response) => {
        const chunks: Buffer[] = []
        response.on('data', (chunk: Buffer) => chunks.push(chunk))
        response.on('end', () => {
          const body = Buffer.concat(chunks).toString('utf8')
          resolve({
            status: response.statusCode!,
            headers: response.headers,
            trailers: response.trailers,
            body,
            json: () => JSON.parse(body),
          })
        })
        response.on('error', reject)
      },
    )
    request.on('error', reject)
    request.end(options.body)
  })
}

/** Shorthand: a request as `apiKey`, optionally acting as `acting`, with extra headers. */
export function callAs(
  baseUrl: string,
  apiKey: string | null,
  options: {
    method?: string
    path: string
    acting?: string
    headers?: [string, string][]
    body?: string | Buffer
    json?: unknown
  },
): Promise<RawResponse> {
  const headers: [string, string][] = []
  if (apiKey !== null) headers.push(['Authorization', `Bearer ${apiKey}`])
  if (options.acting !== undefined) headers.push(['X-Service-Acting-Tenant', options.acting])
  let body = options.body
  if (options.json !== undefined) {
    headers.push(['Content-Type', 'application/json'])
    body = JSON.stringify(options.json)
  }
  if (body !== undefined) headers.push(['Content-Length', String(Buffer.byteLength(body))])
  headers.push(...(options.headers ?? []))
  return rawRequest(baseUrl, { method: options.method, path: options.path, headers, body })
}

export const sha256 = (data: string | Buffer) => createHash('sha256').update(data).digest('hex')

export interface AgentResponse {
  status: number
  headers: IncomingHttpHeaders
  body: Buffer
  /** Node saw the whole message (as framed); rejects instead on a connection error. */
  complete: boolean
}

/** One GET over `agent` (keep-alive clients of a test), read to its end. */
export function getOverAgent(
  base: string,
  agent: Agent,
  path: string,
  headers: Record<string, string>,
  /** A body (then the method defaults to POST). */
  body?: string,
): Promise<AgentResponse> {
  const url = new URL(base)
  const method = body === undefined ? 'GET' : 'POST'
  return new Promise((resolve, reject) => {
    const request = httpRequest({ host: url.hostname, port: url.port, path, agent, headers, method }, (response) => {
      const chunks: Buffer[] = []
      response.on('data', (chunk: Buffer) => chunks.push(chunk))
      response.on('error', reject)
      response.on('end', () =>
        resolve({
          status: response.statusCode!,
          headers: response.headers,
          body: Buffer.concat(chunks),
          complete: response.complete,
        }),
      )
    })
    request.on('error', reject)
    request.end(body)
  })
}
