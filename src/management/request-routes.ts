// The request log (docs/api.md, Request log): the calling parent's answered requests, newest
// first, filtered and paged with signed cursors like the other lists, and one by its request id.
import { DATE_TIME_RULE, parseDateTime } from '../dates.js'
import { ApiError, validationFailed } from '../errors.js'
import type { RequestFilter } from '../request-log/filters.js'
import { listRequests, type RequestRow } from '../request-log/queries.js'
import { requestById } from '../request-log/record-by-id.js'
import type { TenancyLookups } from '../shared/tenancy-records.js'
import { type ManagementContext, managementOperation, parentOf } from './common.js'
import { parentPlaces, type ReadPlace, type RequestLogReader } from './log-reads.js'
import type { OperationTable } from './operation-table.js'
import { accountOperation } from './operation-shapes.js'
import type { Cursors, CursorScope } from './paging.js'
import { RequestPage, RequestParams, RequestRecord, RequestsQuery } from '../schemas/requests.js'
import { PAGE_LIMIT_DEFAULT } from '../schemas/common.js'

export function presentRequest(row: RequestRow): RequestRecord {
  return {
    id: row.id,
    time: row.time.toISOString(),
    account_id: row.account_id,
    tenant_id: row.tenant_id,
    key_id: row.key_id,
    method: row.method,
    route: row.route,
    path: row.path,
    status: row.status,
    code: row.code,
    duration_ms: Math.round(row.duration_ms * 1000) / 1000,
    request_bytes: Number(row.request_bytes),
    response_bytes: Number(row.response_bytes),
    source_ip: row.source_ip,
    // Units: absent from a management record, and from rows written before they were kept.
    ...(row.cost === null || row.cost === 0 ? {} : { cost: row.cost }),
    ...(row.units === null ? {} : { units: JSON.parse(row.units) as Record<string, number> }),
    ...(row.would_refuse === null ? {} : { would_refuse: row.would_refuse.split(',') }),
    outcome: row.outcome,
    ...(row.cell === null ? {} : { cell: row.cell }),
    ...(row.trace_id === null ? {} : { trace_id: row.trace_id }),
  }
}

/** An RFC 3339 date-time as a Date; a leap second or a year outside 0001–9999 (dates.ts) is a 400. */
function instant(value: string | undefined, name: 'since' | 'until'): Date | null {
  if (value === undefined) return null
  const date = parseDateTime(value)
  if (date === null) throw validationFailed([{ path: `/querystring/${name}`, message: DATE_TIME_RULE }])
  return date
}

/** `404`, or `4xx` in either case. */
function statusFilter(status: string | undefined): RequestFilter['status'] {
  if (status === undefined) return null
  return /xx$/i.test(status) ? { class: Number(status[0]) } : { exact: Number(status) }
}

/** The filters of a query, checked (400 for a bad time or range); the tenant, position and size are the caller's. */
export function requestFilter(query: {
  key_id?: string
  status?: string
  code?: string
  route?: string
  since?: string
  until?: string
}): Omit<RequestFilter, 'tenantId' | 'beforeSeq' | 'limit'> {
  const since = instant(query.since, 'since')
  const until = instant(query.until, 'until')
  if (since !== null && until !== null && since > until)
    throw validationFailed([{ path: '/querystring/since', message: 'must not be after until' }])
  return {
    keyId: query.key_id?.toLowerCase() ?? null,
    status: statusFilter(query.status),
    code: query.code ?? null,
    route: query.route ?? null,
    since,
    until,
  }
}

/** What tells a filter's sub-account and key from another parent's. */
export type OwnerLookups = Pick<TenancyLookups, 'subAccount' | 'keyById'>

/** Whether `tenantId` is the account itself or one of its sub-accounts. */
async function isOwnTenant(lookups: OwnerLookups, accountId: string, tenantId: string): Promise<boolean> {
  return tenantId === accountId || (await lookups.subAccount(accountId, tenantId)) !== null
}

/**
 * Whether the filter's sub-account and key are the account's. Another parent's match nothing and
 * are not looked for: their rows are found through GIN indexes that hold every parent's rows, and
 * a busy sub-account of another parent's made one page read all of its rows (queries.ts, nextRows).
 */
async function filterIsOwn(
  lookups: OwnerLookups,
  accountId: string,
  { tenantId, keyId }: Pick<RequestFilter, 'tenantId' | 'keyId'>,
): Promise<boolean> {
  if (tenantId !== null && !(await isOwnTenant(lookups, accountId, tenantId))) return false
  if (keyId === null) return true
  const key = await lookups.keyById(keyId)
  return key !== null && (await isOwnTenant(lookups, accountId, key.tenantId))
}

/**
 * A page of the log, for the API and the portal: up to `limit` records, and the next page's cursor.
 * A page that read as much as a page may (queries.ts, MAX_ROWS_READ) holds fewer, even none, and
 * its cursor goes on from the last row it read.
 */
export async function requestPage(
  log: RequestLogReader,
  lookups: OwnerLookups,
  accountId: string,
  places: readonly ReadPlace[],
  filter: Omit<RequestFilter, 'limit'>,
  limit: number,
  cursors: Cursors,
  scope: CursorScope,
): Promise<{ data: RequestRecord[]; next_cursor: string | null }> {
  if (!(await filterIsOwn(lookups, accountId, filter))) return { data: [], next_cursor: null }
  const { records, resumeBefore } = await log.reads.run(places, () =>
    listRequests(log.sql, accountId, { ...filter, limit: limit + 1 }, { statementTimeoutMs: log.statementTimeoutMs }),
  )
  if (resumeBefore === null) return cursors.page(records, limit, presentRequest, scope)
  return { data: records.map(presentRequest), next_cursor: await cursors.encode(resumeBefore, scope) }
}

/** The log's list and one record, in the order they are registered; with the log off, every list is empty. */
export const REQUEST_OPERATIONS: OperationTable<ManagementContext> = [
  managementOperation({
    method: 'GET',
    url: '/requests',
    // Its own places (log-reads.ts: two a parent, a third 429 at once), not the gate's.
    ...accountOperation(
      'sub_accounts:read',
      'listRequests',
      { querystring: RequestsQuery, response: { 200: RequestPage } },
      { heavyRead: 'own place' },
    ),
    async handler(request, _reply, { cursors, requestLog: log, ownerLookups }) {
      const query = request.query
      const { limit = PAGE_LIMIT_DEFAULT } = query
      const scope = { list: 'requests', owner: parentOf(request).id } as const
      const beforeSeq = await cursors.decode(query.cursor, scope)
      const filter = requestFilter(query)
      if (log === null) return { data: [], next_cursor: null }
      const tenantId = query.sub_account_id?.toLowerCase() ?? null
      return requestPage(
        log,
        ownerLookups(),
        parentOf(request).id,
        parentPlaces(parentOf(request).id),
        { ...filter, tenantId, beforeSeq },
        limit,
        cursors,
        scope,
      )
    },
  }),

  managementOperation({
    method: 'GET',
    url: '/requests/:id',
    // Its own places (log-reads.ts: two a parent, a third 429 at once), not the gate's.
    ...accountOperation(
      'sub_accounts:read',
      'getRequest',
      { params: RequestParams, response: { 200: RequestRecord } },
      { heavyRead: 'own place' },
    ),
    async handler(request, _reply, { requestLog: log }) {
      const accountId = parentOf(request).id
      const row =
        log === null
          ? null
          : await log.reads.run(parentPlaces(accountId), () =>
              requestById(log.sql, accountId, request.params.id, { statementTimeoutMs: log.statementTimeoutMs }),
            )
      if (row === null) throw new ApiError('not_found', 'no request of this account has this id in the request log')
      return presentRequest(row)
    },
  }),
]
