// What the proxy-headers files share: the identity an upstream must receive (exactly the four
// trusted X-Service-* headers, once each), the management calls that set a deployment up, and a
// proxied request over a real socket. Nothing here starts anything: each file starts its own.
import type { Test } from 'tap'
import type { Parent, TestGateway } from './gateway.js'
import { rawRequest, type RawResponse } from './http.js'
import type { JsonBody } from './json.js'
import type { ReceivedRequest } from './upstream.js'

export const METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const
export type Method = (typeof METHODS)[number]
export const UUID_V4ISH = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
export const PARENT_SCOPES = 'sub_accounts:read sub_accounts:write'

/** Header names the upstream received (raw, lower-cased), with how often each came. */
export function rawNameCounts(received: ReceivedRequest): Map<string, number> {
  const counts = new Map<string, number>()
  for (let i = 0; i < received.rawHeaders.length; i += 2) {
    const name = received.rawHeaders[i]!.toLowerCase()
    counts.set(name, (counts.get(name) ?? 0) + 1)
  }
  return counts
}

export function serviceHeaderNames(received: ReceivedRequest): string[] {
  return [...rawNameCounts(received).keys()].filter((name) => name.startsWith('x-service-')).sort()
}

export const IDENTITY_HEADERS = [
  'x-service-caller-tenant',
  'x-service-key-id',
  'x-service-resolved-tenant',
  'x-service-scopes',
]

export interface Identity {
  resolved: string
  caller: string
  keyId: string
  scopes: string
}

/** Exactly the four identity headers, once each, with these values; and a sane X-Request-Id. */
export function checkIdentity(t: Test, received: ReceivedRequest, expected: Identity, what: string): void {
  const counts = rawNameCounts(received)
  t.same(serviceHeaderNames(received), IDENTITY_HEADERS, `${what}: only the trusted X-Service-* headers`)
  for (const name of IDENTITY_HEADERS) t.equal(counts.get(name), 1, `${what}: ${name} once`)
  t.equal(received.headers['x-service-resolved-tenant'], expected.resolved, `${what}: resolved tenant`)
  t.equal(received.headers['x-service-caller-tenant'], expected.caller, `${what}: caller tenant`)
  t.equal(received.headers['x-service-key-id'], expected.keyId, `${what}: key id`)
  t.equal(received.headers['x-service-scopes'], expected.scopes, `${what}: scopes`)
  t.equal(counts.get('x-request-id'), 1, `${what}: one X-Request-Id`)
}

export async function keyIdOf(gw: TestGateway, tenantId: string): Promise<string> {
  const rows = await gw.database.sql`select id from api_keys where tenant_id = ${tenantId} order by seq`
  if (rows.length !== 1) throw new Error(`expected one key for ${tenantId}, found ${rows.length}`)
  return rows[0]!.id as string
}

/** A management call that must succeed (setup); throws with the answer otherwise. */
export async function manage(
  gw: TestGateway,
  parent: Parent,
  method: string,
  path: string,
  json?: unknown,
): Promise<JsonBody> {
  const body = json === undefined ? undefined : JSON.stringify(json)
  const headers: [string, string][] = [
    ['Authorization', `Bearer ${parent.apiKey}`],
    ['X-Service-Acting-Tenant', 'self'],
  ]
  // No body: say so with Content-Length: 0 (node would otherwise send an empty chunked body).
  headers.push(
    ...((body === undefined ? [['Content-Length', '0']] : [['Content-Type', 'application/json']]) as [
      string,
      string,
    ][]),
  )
  const res = await rawRequest(gw.url, { method, path, headers, ...(body === undefined ? {} : { body }) })
  if (res.status >= 300) throw new Error(`setup ${method} ${path}: ${res.status} ${res.body}`)
  return res.json()
}

export async function createSub(gw: TestGateway, parent: Parent, name: string, externalId: string) {
  return (await manage(gw, parent, 'POST', '/v1/sub-accounts', { name, external_id: externalId })) as { id: string }
}

export async function mintSubKey(gw: TestGateway, parent: Parent, subId: string, scopes: string[]) {
  return (await manage(gw, parent, 'POST', `/v1/sub-accounts/${subId}/api-keys`, { name: 'k', scopes })) as {
    id: string
    api_key: string
  }
}

/** A proxied request: key, acting header lines (in order), a small JSON body on POST/PUT/PATCH. */
export function proxied(
  gw: TestGateway,
  key: string | null,
  method: Method,
  path: string,
  acting: string | string[] | undefined,
  extra: [string, string][] = [],
): { sent: Promise<RawResponse>; body: string | undefined } {
  const headers: [string, string][] = []
  if (key !== null) headers.push(['Authorization', `Bearer ${key}`])
  for (const value of acting === undefined ? [] : Array.isArray(acting) ? acting : [acting]) {
    headers.push(['X-Service-Acting-Tenant', value])
  }
  const body = method === 'GET' || method === 'DELETE' ? undefined : `{"method":"${method}","path":"${path}"}`
  if (body !== undefined)
    headers.push(['Content-Type', 'application/json'], ['Content-Length', String(Buffer.byteLength(body))])
  headers.push(...extra)
  return { sent: rawRequest(gw.url, { method, path, headers, ...(body === undefined ? {} : { body }) }), body }
}
