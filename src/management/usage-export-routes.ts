// The usage export, pulled (docs/billing.md): the closed periods' units of the parent's account, as
// CloudEvents (ndjson) or their data (csv), streamed as Postgres gives them. The push sends the same
// records; the operator's CLI pulls them for every account.
import { Readable } from 'node:stream'
import { closedUntil, exportRows } from '../store/usage-periods.js'
import { EXPORT_CONTENT_TYPES, exportEnd, exportInstant, exportRange, exportText } from '../usage/export.js'
import { heavyReadTurn, leaveHeavyReadPlace } from './heavy-reads.js'
import { answeredByStoreDeadline, stopStoreDeadline } from './hooks.js'
import { type ManagementContext, managementOperation, operation, parentOf } from './common.js'
import type { OperationTable } from './operation-table.js'
import { UsageEvent, UsageExportQuery } from '../schemas/usage-export.js'

/** The header that says where the closed periods end: the range is cut there. */
export const CLOSED_UNTIL_HEADER = 'x-usage-closed-until'

export const USAGE_EXPORT_OPERATIONS: OperationTable<ManagementContext> = [
  managementOperation({
    method: 'GET',
    url: '/usage/export',
    schema: {
      ...operation('exportUsage'),
      querystring: UsageExportQuery,
      response: {
        200: {
          description: 'The records, one a line, oldest period first',
          content: {
            'application/x-ndjson': { schema: UsageEvent },
            'text/csv': { schema: { type: 'string' } },
          },
        },
      },
    },
    // Gated: its first page in the call's place, given back once that page is read; each page
    // after it (a query each, read as the client takes them) in a place of its own.
    config: { scope: 'sub_accounts:read', heavyRead: 'gated' },
    async handler(request, reply, { reads: sql, usageExport }) {
      const format = request.query.format ?? 'ndjson'
      const range = exportRange(request.query, usageExport.periodSeconds, Date.now())
      const closed = await closedUntil(sql)
      const to = exportEnd(range, closed)
      const headers = () => {
        if (closed !== null) reply.header(CLOSED_UNTIL_HEADER, exportInstant(closed))
        return reply.header('cache-control', 'no-store').type(EXPORT_CONTENT_TYPES[format])
      }
      // A HEAD asks for the headers only; an empty stream keeps them as a GET's (chunked).
      if (request.method === 'HEAD') return headers().send(Readable.from([]))
      // The first page under the store deadline: a store that does not answer is a 503, not an
      // empty 200. Each page is a query of its own (store/usage-periods.ts): a client that reads
      // slowly, or leaves, holds no connection.
      // The pages after the first each take a place of the heavy reads' gate (heavy-reads.ts).
      const rows =
        to === null
          ? null
          : exportRows(
              sql,
              { from: range.from, to, accountId: parentOf(request).id },
              undefined,
              heavyReadTurn(request),
            )
      const first = rows === null ? null : await rows.next()
      // The stream returned below settles the handler only at its last byte, however slowly read.
      leaveHeavyReadPlace(request)
      if (answeredByStoreDeadline(request)) return reply
      stopStoreDeadline(request)
      const pages = rows === null || first === null ? [] : pagesFrom(first, rows)
      return headers().send(Readable.from(exportText(pages, { format, ...usageExport })))
    },
  }),
]

/** The pages of an export whose first is read already. */
async function* pagesFrom<T>(first: IteratorResult<T>, rest: AsyncIterator<T>): AsyncGenerator<T> {
  for (let page = first; page.done !== true; page = await rest.next()) yield page.value
}
