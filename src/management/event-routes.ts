// The audit log (docs/api.md, Audit log; docs/events.md): the calling parent's events, newest
// first, paged with signed cursors like the other lists; one event by its id (what a webhook
// delivery carried).
import { DATE_TIME_RULE, parseDateTime } from '../dates.js'
import { validationFailed } from '../errors.js'
import { presentEvent } from '../events/present.js'
import { EVENT_TYPES } from '../events/record.js'
import { type EventFilter, getEvent, listEvents } from '../store/events.js'
import { withActorNames } from './event-actors.js'
import { type ManagementContext, managementOperation, notFound, parentOf } from './common.js'
import type { OperationTable } from './operation-table.js'
import { accountOperation } from './operation-shapes.js'
import { Event, EventPage, EventParams, EventsQuery } from '../schemas/events.js'
import { NoQuery, PAGE_LIMIT_DEFAULT } from '../schemas/common.js'

/** `api_key.revoked`, or `api_key.*` (every type of that resource); anything else is a 400. */
function typeFilter(type: string | undefined): EventFilter['type'] {
  if (type === undefined) return null
  const prefix = type.endsWith('.*') ? type.slice(0, -1) : null
  const known = EVENT_TYPES.some((known) => (prefix === null ? known === type : known.startsWith(prefix)))
  if (!known) throw validationFailed([{ path: '/querystring/type', message: 'is not an event type (docs/events.md)' }])
  return prefix === null ? { exact: type } : { prefix }
}

/** An RFC 3339 date-time as a Date; a leap second or a year outside 0001–9999 (dates.ts) is a 400. */
function instant(value: string | undefined, name: 'since' | 'until'): Date | null {
  if (value === undefined) return null
  const date = parseDateTime(value)
  if (date === null) throw validationFailed([{ path: `/querystring/${name}`, message: DATE_TIME_RULE }])
  return date
}

/** An event id as the gateway makes them (`evt_` and a ULID): anything else names no event. */
const EVENT_ID = /^evt_[0-9A-HJKMNP-TV-Z]{26}$/

/** The audit log's list and one event, in the order they are registered. */
export const EVENT_OPERATIONS: OperationTable<ManagementContext> = [
  managementOperation({
    method: 'GET',
    url: '/events',
    ...accountOperation('sub_accounts:read', 'listEvents', { querystring: EventsQuery, response: { 200: EventPage } }),
    async handler(request, _reply, { sql, cursors }) {
      const { limit = PAGE_LIMIT_DEFAULT, cursor, since, until } = request.query
      const accountId = parentOf(request).id
      const scope = { list: 'events', owner: accountId } as const
      const beforeSeq = await cursors.decode(cursor, scope)
      const type = typeFilter(request.query.type)
      const from = instant(since, 'since')
      const to = instant(until, 'until')
      if (from !== null && to !== null && from > to)
        throw validationFailed([{ path: '/querystring/since', message: 'must not be after until' }])
      const rows = await listEvents(sql, accountId, {
        limit: limit + 1,
        beforeSeq,
        type,
        targetId: request.query.target_id ?? null,
        subAccountId: request.query.sub_account_id?.toLowerCase() ?? null,
        since: from,
        until: to,
      })
      const page = await cursors.page(rows, limit, presentEvent, scope)
      if (request.query.expand !== 'actor') return page
      return { ...page, data: await withActorNames(sql, accountId, page.data) }
    },
  }),

  managementOperation({
    method: 'GET',
    url: '/events/:event_id',
    ...accountOperation('sub_accounts:read', 'getEvent', {
      params: EventParams,
      querystring: NoQuery,
      response: { 200: Event },
    }),
    async handler(request, _reply, { sql }) {
      const id = request.params.event_id
      const row = EVENT_ID.test(id) ? await getEvent(sql, parentOf(request).id, id) : null
      if (row === null) throw notFound('event')
      return presentEvent(row)
    },
  }),
]
