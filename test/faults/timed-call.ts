// Calls with a deadline: a request that gets no answer is abandoned, so that a test about a hang
// ends rather than hangs.
import { randomBytes } from 'node:crypto'
import { request as httpRequest } from 'node:http'
import type { RawResponse } from '../helpers/http.js'
import { round } from './measuring.js'

export interface Timed {
  /** The X-Request-Id sent (the gateway keeps it and answers with it). */
  requestId: string
  /** null: no answer within the limit (the request was then abandoned). */
  res: RawResponse | null
  ms: number
  /** The connection failed before an answer (its error code). */
  error: string | null
}

export interface CallOptions {
  method?: string
  path: string
  acting?: string
  json?: unknown
}

/**
 * callAs, on a fresh connection, timed from the first byte sent to the last byte received; a
 * request with no answer within `limitMs` is abandoned (its socket destroyed), so that a test
 * about a hang ends rather than hangs.
 */
export function timedCall(
  baseUrl: string,
  apiKey: string | null,
  options: CallOptions,
  limitMs: number,
): Promise<Timed> {
  const url = new URL(baseUrl)
  const requestId = `fault-${randomBytes(8).toString('hex')}`
  const headers: Record<string, string> = { 'x-request-id': requestId }
  if (apiKey !== null) headers.authorization = `Bearer ${apiKey}`
  if (options.acting !== undefined) headers['x-service-acting-tenant'] = options.acting
  let body: string | undefined
  if (options.json !== undefined) {
    body = JSON.stringify(options.json)
    headers['content-type'] = 'application/json'
    headers['content-length'] = String(Buffer.byteLength(body))
  }
  return new Promise((resolve) => {
    const start = performance.now()
    let settled = false
    const settle = (value: Omit<Timed, 'ms' | 'requestId'>) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      resolve({ ...value, requestId, ms: performance.now() - start })
    }
    const request = httpRequest(
      {
        host: url.hostname,
        port: url.port,
        method: options.method ?? 'GET',
        path: options.path,
        headers,
        agent: false,
      },
      (response) => {
        const chunks: Buffer[] = []
        response.on('data', (chunk: Buffer) => chunks.push(chunk))
        response.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8')
          settle({
            res: { status: response.statusCode!, headers: response.headers, body: text, json: () => JSON.parse(text) },
            error: null,
          })
        })
        response.on('error', (err: NodeJS.ErrnoException) => settle({ res: null, error: err.code ?? err.message }))
      },
    )
    const timer = setTimeout(() => {
      settle({ res: null, error: null })
      request.destroy()
    }, limitMs)
    request.on('error', (err: NodeJS.ErrnoException) => settle({ res: null, error: err.code ?? err.message }))
    request.end(body)
  })
}

/** The problem `code` of a response, or null. */
export function codeOf(res: RawResponse | null): string | null {
  if (res === null) return null
  try {
    return (res.json() as { code?: string }).code ?? null
  } catch {
    return null
  }
}

/** "503 store_unavailable in 4 ms", "no answer within 2000 ms", for messages. */
export function describeTimed(timed: Timed, limitMs?: number): string {
  if (timed.res === null)
    return timed.error === null
      ? `no answer within ${limitMs ?? round(timed.ms)} ms`
      : `connection failed: ${timed.error}`
  return `${timed.res.status} ${codeOf(timed.res) ?? ''} in ${round(timed.ms)} ms`.replace('  ', ' ')
}
