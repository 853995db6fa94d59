// The proxied routes and their targets' state (docs/api.md, Routes), for the console's Routes
// screen: the same for every parent (the route table is the gateway's), read from this replica.
import { NoQuery } from '../schemas/common.js'
import { RouteList } from '../schemas/routes.js'
import { type ManagementContext, managementOperation } from './common.js'
import type { OperationTable } from './operation-table.js'
import { accountOperation } from './operation-shapes.js'

export const PROXIED_ROUTE_OPERATIONS: OperationTable<ManagementContext> = [
  managementOperation({
    method: 'GET',
    url: '/routes',
    ...accountOperation('sub_accounts:read', 'listRoutes', { querystring: NoQuery, response: { 200: RouteList } }),
    handler: async (_request, _reply, { routeStatuses }) => ({ data: routeStatuses() }),
  }),
]
