// The operation tables (management/operation-table.ts): every operation registered exactly once by
// the one loop, every documented operation in a table, each with what its caller must hold: the
// management scope of its method (GET reads, every other method writes), a portal permission.
import Fastify, { type RouteOptions } from 'fastify'
import t from 'tap'
import { type OperationTable, registerOperations } from '../../src/management/operation-table.js'
import { OPERATIONS } from '../../src/management/operations.js'
import { PORTAL_SESSION_OPERATIONS } from '../../src/management/portal-session-routes.js'
import { MANAGEMENT_HOOKS, MANAGEMENT_OPERATIONS } from '../../src/management/routes.js'
import { PORTAL_API_OPERATIONS } from '../../src/portal/api-routes.js'
import { EXCHANGE_OPERATIONS } from '../../src/portal/exchange-routes.js'

const MANAGEMENT = [...MANAGEMENT_OPERATIONS, ...PORTAL_SESSION_OPERATIONS]

/** What one loop registers on a bare instance: every route fastify is given (HEAD aliases left out). */
async function registered(table: OperationTable<unknown>): Promise<RouteOptions[]> {
  const app = Fastify()
  const routes: RouteOptions[] = []
  app.addHook('onRoute', (route) => {
    if (route.method !== 'HEAD') routes.push(route)
  })
  // onRoute runs as each route is added: nothing needs compiling, no server starts.
  registerOperations(app, table, {})
  await app.close()
  return routes
}

const key = (o: { method: unknown; url: string }) => `${String(o.method)} ${o.url}`

t.test('each table: every operation registered once, in its order, with its schema and config', async (t) => {
  for (const [name, table] of Object.entries({ MANAGEMENT, PORTAL_API_OPERATIONS, EXCHANGE_OPERATIONS })) {
    const routes = await registered(table as OperationTable<unknown>)
    t.same(routes.map(key), table.map(key), `${name}: the routes are the table's, in order`)
    t.equal(new Set(table.map(key)).size, table.length, `${name}: no method and path twice`)
    for (const [i, operation] of table.entries()) {
      t.equal(routes[i]?.schema, operation.schema, `${key(operation)}: its schema`)
      t.same(routes[i]?.config, operation.config, `${key(operation)}: its config`)
    }
  }
})

t.test('every documented management operation is in a table once, with the scope of its method', async (t) => {
  const ids = MANAGEMENT.map((o) => (o.schema as { operationId?: string }).operationId)
  t.same([...ids].sort(), Object.keys(OPERATIONS).sort(), 'each operationId of operations.ts once')
  // A POST that writes nothing: the simulator computes an answer from the log (docs/api.md).
  const readsByPost = new Set(['POST /limits/simulations'])
  for (const o of MANAGEMENT) {
    const scope = o.method === 'GET' || readsByPost.has(key(o)) ? 'sub_accounts:read' : 'sub_accounts:write'
    t.equal(o.config?.scope, scope, `${key(o)} needs ${scope}`)
  }
})

t.test('every portal API operation needs a permission and is left out of the document', async (t) => {
  for (const o of PORTAL_API_OPERATIONS) {
    t.ok(o.config?.permission, `${key(o)} needs ${o.config?.permission}`)
    t.equal((o.schema as { hide?: boolean }).hide, true, `${key(o)} is hidden`)
  }
  for (const o of EXCHANGE_OPERATIONS) t.equal((o.schema as { hide?: boolean }).hide, true, `${key(o)} is hidden`)
})

t.test('the management hooks, phase by phase, in the order they run', async (t) => {
  const phases = MANAGEMENT_HOOKS.map((h) => h.phase)
  const order = ['onRoute', 'onRequest', 'preParsing', 'preValidation', 'onSend', 'onResponse']
  t.same(
    phases,
    [...phases].sort((a, b) => order.indexOf(a) - order.indexOf(b)),
    'grouped by phase, as they run',
  )
  const onRequest = MANAGEMENT_HOOKS.filter((h) => h.phase === 'onRequest').map((h) => h.name)
  t.same(
    onRequest,
    ['store deadline starts', 'tenancy', 'authorization', 'management rate', 'idempotency key read', '100-continue'],
    'the deadline first (it covers the tenancy lookups), the authorization before the rate, the claim after both',
  )
  t.equal(new Set(MANAGEMENT_HOOKS.map((h) => h.name)).size, MANAGEMENT_HOOKS.length, 'each name once')
})
