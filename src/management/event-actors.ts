// `expand=actor` on the audit log (docs/api.md, Audit log): each event's actor with who it is, so
// that a reader sees "key ci (tgw_ab12…)" rather than a bare id. Two reads a page, whatever its size.
import type { Event } from '../schemas/events.js'
import type { Sql } from '../store/db.js'
import { keyActors, portalSessionActors } from '../store/event-actors.js'
import { isUuid } from '../shared/identifiers.js'

/** The page's events, each actor named: a key by its name, prefix and sub-account; a portal session by its sub-account. */
export async function withActorNames(sql: Sql, accountId: string, events: Event[]): Promise<Event[]> {
  const ids = (type: Event['actor']['type'], idOf: (actor: Event['actor']) => string | null | undefined) => [
    ...new Set(
      events
        .filter((e) => e.actor.type === type)
        .map((e) => idOf(e.actor))
        .filter((id): id is string => typeof id === 'string' && isUuid(id)),
    ),
  ]
  const [keys, sessions] = await Promise.all([
    keyActors(
      sql,
      accountId,
      ids('api_key', (a) => a.key_id),
    ),
    portalSessionActors(
      sql,
      accountId,
      ids('portal_session', (a) => a.id),
    ),
  ])
  const keyById = new Map(keys.map((k) => [k.id, k]))
  const sessionById = new Map(sessions.map((s) => [s.id, s]))
  return events.map((e) => {
    if (e.actor.type === 'api_key') {
      const key = e.actor.key_id === null ? undefined : keyById.get(e.actor.key_id)
      return {
        ...e,
        actor: {
          ...e.actor,
          name: key?.name ?? null,
          prefix: key?.prefix ?? null,
          sub_account_id: key?.sub_account_id ?? null,
        },
      }
    }
    if (e.actor.type === 'portal_session') {
      const session = e.actor.id === undefined ? undefined : sessionById.get(e.actor.id)
      return { ...e, actor: { ...e.actor, sub_account_id: session?.sub_account_id ?? null } }
    }
    return e
  })
}
