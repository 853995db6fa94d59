// docs/api.md held true: its Endpoints table names every operation the app serves (from the
// OpenAPI document and from the routes the app registers), once, and nothing the app does not
// serve; and every operation in the OpenAPI document has an operationId.
import { readFileSync } from 'node:fs'
import t from 'tap'
import { startGateway } from '../helpers/gateway.js'
import type { JsonBody as Json } from '../helpers/json.js'

const API_MD = new URL('../../docs/api.md', import.meta.url)

/**
 * Served under a row's path, by that row: Swagger UI's files, the console's assets and the
 * portal's. The row must say so, with the prefix in backquotes.
 */
const SUBTREES = {
  'GET /docs': '/docs/',
  'GET /console': '/console/assets/',
  'GET /portal': '/portal/assets/',
} as const

/** The Endpoints table's rows: `METHOD /path` of each, and the rest of its line. */
function endpointRows(markdown: string): { operation: string; line: string }[] {
  const section = markdown.split(/^## Endpoints$/m)[1]?.split(/^## /m)[0]
  if (section === undefined) throw new Error('docs/api.md has no "## Endpoints" section')
  return [...section.matchAll(/^\| `([A-Z]+ \/[^`]*)` \|.*$/gm)].map((match) => ({
    operation: match[1]!,
    line: match[0],
  }))
}

/** `/v1/sub-accounts/:sub_id/` → `/v1/sub-accounts/{sub_id}` */
const openApiPath = (url: string) => url.replace(/(.)\/$/, '$1').replace(/:([A-Za-z0-9_]+)/g, '{$1}')

t.test('the table reads rows, and only the rows of its own section', async (t) => {
  const markdown = [
    '## Endpoints',
    '',
    '| method and path | key |',
    '|---|---|',
    '| `GET /a/{id}` | none |',
    '| `POST /b` | parent |',
    '| any other method and path | per route |',
    '',
    '## Next',
    '| `GET /not-a-row` | none |',
  ].join('\n')
  t.same(
    endpointRows(markdown).map((row) => row.operation),
    ['GET /a/{id}', 'POST /b'],
  )
  t.throws(() => endpointRows('# API'), /no "## Endpoints" section/)
})

t.test('docs/api.md lists what the app serves, once, and nothing else', async (t) => {
  const gw = await startGateway(t, { listen: false, redis: false, recordRoutes: true })
  const res = await gw.app.inject({ method: 'GET', url: '/openapi.json' })
  t.equal(res.statusCode, 200)
  const doc: Json = res.json()

  // A path item with servers of its own is served on another port (AUTHZ_PORT's POST /verify):
  // docs/api.md gives it a section of its own, not a row of PORT's endpoints.
  const documented = Object.entries(doc.paths as Record<string, Record<string, Json>>).flatMap(([path, item]) =>
    Object.entries(item)
      .filter(([method]) => method !== 'servers')
      .map(([method, op]) => ({ operation: `${method.toUpperCase()} ${path}`, op, elsewhere: 'servers' in item })),
  )
  t.ok(documented.length > 20, `the OpenAPI document has the operations (${documented.length})`)
  const operationIds = new Set<string>()
  for (const { operation, op } of documented) {
    if (!t.match(op.operationId, /^[a-zA-Z]+$/, `${operation}: an operationId`)) continue
    t.notOk(operationIds.has(op.operationId), `${operation}: ${op.operationId} is unique`)
    operationIds.add(op.operationId)
  }

  const rows = endpointRows(readFileSync(API_MD, 'utf8'))
  const listed = rows.map((row) => row.operation)
  t.same(
    listed.filter((operation, i) => listed.indexOf(operation) !== i),
    [],
    'no operation is listed twice',
  )
  for (const [operation, prefix] of Object.entries(SUBTREES)) {
    const row = rows.find((r) => r.operation === operation)
    t.match(row?.line, `\`${prefix}\``, `${operation}'s row says it serves ${prefix}`)
  }

  // Every route the app registers (HEAD is every GET's twin), bar those its subtree's row covers.
  const served = new Set(
    gw.routes
      .filter((route) => route.method !== 'HEAD')
      .map((route) => `${route.method} ${openApiPath(route.url)}`)
      .filter((operation) => !Object.values(SUBTREES).some((prefix) => operation.split(' ')[1]!.startsWith(prefix))),
  )
  for (const { operation, elsewhere } of documented) {
    if (elsewhere) {
      t.match(
        readFileSync(API_MD, 'utf8'),
        `\`${operation}\``,
        `${operation} (OpenAPI, another port) is in docs/api.md`,
      )
      continue
    }
    t.ok(listed.includes(operation), `${operation} (OpenAPI) has its row in docs/api.md`)
    t.ok(served.has(operation), `${operation} (OpenAPI) is a route the app registers`)
  }
  for (const operation of served) t.ok(listed.includes(operation), `${operation} (a route) has its row in docs/api.md`)
  for (const operation of listed) t.ok(served.has(operation), `docs/api.md's ${operation} is a route the app serves`)
})
