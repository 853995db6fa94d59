// The problem+json envelope every refusal of the gateway carries (docs/api.md), checked on an
// injected response and on one read over a socket.
import type { LightMyRequestResponse } from 'fastify'
import type { Test } from 'tap'
import type { RawResponse } from './http.js'

/** Asserts the problem+json envelope (docs/api.md) of an injected response and returns the body. */
export function problemOf(response: LightMyRequestResponse): {
  code: string
  status: number
  errors?: { path: string; message: string }[]
  [k: string]: unknown
} {
  if (!String(response.headers['content-type']).startsWith('application/problem+json')) {
    throw new Error(`expected problem+json, got ${response.headers['content-type']}: ${response.body}`)
  }
  const body = response.json()
  for (const field of ['type', 'title', 'status', 'detail', 'code', 'request_id']) {
    if (!(field in body)) throw new Error(`problem lacks "${field}": ${response.body}`)
  }
  if (body.status !== response.statusCode) throw new Error(`problem status ${body.status} != ${response.statusCode}`)
  return body
}

/** Checks the problem+json envelope (docs/api.md) of a refusal and returns its body. */
export function checkProblem(
  t: Test,
  res: RawResponse,
  status: number,
  code: string,
  what: string,
): Record<string, unknown> {
  t.equal(res.status, status, `${what}: status ${status} (${res.body.slice(0, 200)})`)
  t.match(String(res.headers['content-type']), /^application\/problem\+json/, `${what}: problem+json`)
  let body: Record<string, unknown> = {}
  try {
    body = res.json()
  } catch {
    t.fail(`${what}: body is not JSON: ${res.body}`)
  }
  t.equal(body.code, code, `${what}: code`)
  t.equal(body.status, status, `${what}: status in body`)
  t.equal(body.request_id, res.headers['x-request-id'], `${what}: request_id is the response's X-Request-Id`)
  return body
}
