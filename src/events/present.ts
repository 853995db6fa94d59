// An event as the API shows it (docs/events.md): the audit log's items and the `data` of a
// webhook delivery are the same document.
import type { Event } from '../schemas/events.js'
import type { EventRow } from '../store/events.js'

export function presentEvent(row: EventRow): Event {
  return {
    id: row.id,
    type: row.type,
    created_at: row.created_at.toISOString(),
    account_id: row.account_id,
    actor: row.actor,
    target: row.target as Event['target'],
    request_id: row.request_id,
    source_ip: row.source_ip,
    data: row.data,
  }
}
