// The audit log (docs/api.md, Audit log; docs/events.md): the calling parent's events, newest
// first, paged with signed cursors like the other lists.
import { DATE_TIME_RULE, parseDateTime } from '../dates.js'
import { validationFailed } from '../errors.js'
import { presentEvent } from '../events/present.js'
import { EVENT_TYPES } from '../events/record.js'
import { type EventFilter, listEvents } from '../store/events.js'
import { type ManagementApp, type ManagementContext, operation, parentOf } from './common.js'
import { EventPage, EventsQuery, PAGE_LIMIT_DEFAULT } from './schemas.js'

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

export function registerEventRoutes(app: ManagementApp, { sql, cursors }: ManagementContext): void {
  app.get(
    '/events',
    { schema: { ...operation('listEvents'), querystring: EventsQuery, response: { 200: EventPage } } },
    async (request) => {
      const { limit = PAGE_LIMIT_DEFAULT, cursor, since, until } = request.query
      const scope = { list: 'events', owner: parentOf(request).id } as const
      const beforeSeq = await cursors.decode(cursor, scope)
      const type = typeFilter(request.query.type)
      const from = instant(since, 'since')
      const to = instant(until, 'until')
      if (from !== null && to !== null && from > to)
        throw validationFailed([{ path: '/querystring/since', message: 'must not be after until' }])
      const rows = await listEvents(sql, parentOf(request).id, {
        limit: limit + 1,
        beforeSeq,
        type,
        targetId: request.query.target_id ?? null,
        since: from,
        until: to,
      })
      return cursors.page(rows, limit, presentEvent, scope)
    },
  )
}
