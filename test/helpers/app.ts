// Builds the gateway in-process on a fresh database, with a parent account to call it as.
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify'
import { buildApp } from '../../src/app.js'
import { createParentWithKey, mintKey } from '../../src/auth/mint.js'
import { loadConfig } from '../../src/config.js'
import type { Metrics } from '../../src/ops/metrics.js'
import type { Sql, Store } from '../../src/store/db.js'
import { freshDatabase } from './db.js'

export interface Parent {
  id: string
  apiKey: string
}

export type CallOptions = Omit<InjectOptions, 'body' | 'payload'> & { body?: unknown; acting?: string }

export interface TestGateway {
  app: FastifyInstance
  sql: Sql
  url: string
  /** A parent account with both management scopes. */
  parent: Parent
  createParent(options?: { scopes?: string[] }): Promise<Parent>
  /** Calls the app as `apiKey`, with a JSON body when `body` is given. */
  call(apiKey: string | null, options: CallOptions): Promise<LightMyRequestResponse>
}

interface TestLike {
  teardown(fn: () => unknown): void
}

export async function testGateway(t: TestLike): Promise<TestGateway> {
  const db = await freshDatabase(t)
  const store: Store = { sql: db.sql, embedded: false, close: async () => {} }
  const app = await buildApp({ config: loadConfig({ DATABASE_URL: db.url }), store })
  t.teardown(() => app.close())

  async function createParent(options: { scopes?: string[] } = {}): Promise<Parent> {
    return db.sql.begin(async (tx) => {
      const { account, key } = await createParentWithKey(tx, { name: 'parent', externalId: null, extraScopes: [] })
      if (options.scopes === undefined) return { id: account.id, apiKey: key.apiKey }
      // A key with exactly the given scopes, for scope checks.
      const scoped = await mintKey(tx, { tenantId: account.id, name: 'scoped', scopes: options.scopes, withClientSecret: false })
      return { id: account.id, apiKey: scoped.apiKey }
    })
  }

  const call: TestGateway['call'] = (apiKey, { body, acting, headers, ...options }) =>
    app.inject({
      ...options,
      headers: {
        ...(apiKey === null ? {} : { authorization: `Bearer ${apiKey}` }),
        ...(acting === undefined ? {} : { 'x-service-acting-tenant': acting }),
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        ...headers,
      },
      ...(body === undefined ? {} : { payload: typeof body === 'string' ? body : JSON.stringify(body) }),
    })

  return { app, sql: db.sql, url: db.url, parent: await createParent(), createParent, call }
}

/** Asserts the problem+json envelope of DESIGN §7 and returns the body. */
export function problemOf(response: LightMyRequestResponse): { code: string; status: number; errors?: { path: string; message: string }[]; [k: string]: unknown } {
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

/**
 * The value of one series of a metric in the registry of an app (or of anything else that holds
 * the gateway's metrics): the first whose labels include all of `labels` (so none given: the first
 * series); 0 when there is none yet.
 */
export async function metricValue(holder: { metrics: Metrics }, name: string, labels: Record<string, string> = {}): Promise<number> {
  const metric = holder.metrics.registry.getSingleMetric(name)
  if (metric === undefined) throw new Error(`no metric ${name}`)
  const { values } = await metric.get()
  const value = values.find((v) => Object.entries(labels).every(([k, want]) => String((v.labels as Record<string, unknown>)[k]) === want))
  return value?.value ?? 0
}
