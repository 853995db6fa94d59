// The audit log: newest first, filtered by type (one, or a resource's `*`), target id, sub-account
// (its own events, its keys' and its portal sessions': #/events?sub_account_id=…, as a
// sub-account's page links it) and UTC dates, paged. A target is shown by its name (the event's
// object has it), an actor by the name the API gives with `expand=actor`, each linked to its
// sub-account's page when it has one; an event's data opens in a dialog, a field a row.
import { useEffect, useState } from 'preact/hooks'
import { api, type Page, query } from './api.js'
import { announce, Dialog, formatTime, Pager, usePager, useAction } from './components.js'
import { CardTable, ListStates } from './list-table.js'
import { EventData } from './event-data.js'
import type { AuditEvent } from './types.js'

/** The event catalogue (docs/events.md), each resource's `*` first; the webhooks form offers it too. */
export const TYPES = [
  'sub_account.*',
  'sub_account.created',
  'sub_account.updated',
  'sub_account.deactivated',
  'sub_account.reactivated',
  'api_key.*',
  'api_key.created',
  'api_key.rolled',
  'api_key.revoked',
  'api_key.expiring',
  'api_key.leaked',
  'account.*',
  'account.limits_updated',
  'account.scopes_updated',
  'account.portal_origins_updated',
  'account.settings_updated',
  'webhook_endpoint.*',
  'webhook_endpoint.created',
  'webhook_endpoint.updated',
  'webhook_endpoint.deleted',
  'webhook_endpoint.test',
  'portal_session.*',
  'portal_session.created',
  'portal_session.ended',
  'usage.*',
  'usage.threshold_reached',
  'rate_limit.*',
  'rate_limit.exceeded',
]

/** The day after a UTC date `YYYY-MM-DD`, for an `until` that takes the whole last day in. */
function dayAfter(date: string): string {
  const next = new Date(`${date}T00:00:00Z`)
  next.setUTCDate(next.getUTCDate() + 1)
  return next.toISOString()
}

/** What the event's object says the target is called: a name, a key's name and prefix, a URL. */
function targetName(e: AuditEvent): string | null {
  // The object is the target only in its own resource's events (an alert's object is the rate or quota).
  if (!e.type.startsWith(`${e.target.type}.`)) return null
  const object = (e.data as { object?: Record<string, unknown> } | null)?.object
  if (object === undefined || object === null) return null
  const text = (v: unknown) => (typeof v === 'string' && v !== '' ? v : null)
  if (e.target.type === 'api_key') {
    const name = text(object.name)
    const prefix = text(object.prefix)
    return name === null ? null : prefix === null ? name : `${name} (${prefix}…)`
  }
  if (e.target.type === 'webhook_endpoint') return text(object.url)
  return text(object.name)
}

const subAccountLink = (id: string) => `#/sub-accounts/${encodeURIComponent(id)}`

/**
 * Who made the change, as `expand=actor` names them: a key by its name and prefix (linked to its
 * sub-account when it is one's), a portal session by its sub-account, the operator, the gateway.
 */
function Actor({ actor }: { actor: AuditEvent['actor'] }) {
  if (actor.type === 'operator') return <>the operator (CLI)</>
  if (actor.type === 'gateway') return <>the gateway (an alert)</>
  if (actor.type === 'portal_session') {
    const sub = actor.sub_account_id ?? null
    return (
      <>
        {sub === null ? 'a portal session' : <a href={subAccountLink(sub)}>a portal session of its sub-account</a>}
        <span class="sub-line mono">{actor.id ?? ''}</span>
      </>
    )
  }
  const named = actor.name != null ? `key ${actor.name}${actor.prefix != null ? ` (${actor.prefix}…)` : ''}` : null
  const sub = actor.sub_account_id ?? null
  return (
    <>
      {named === null ? 'a key' : sub === null ? `${named}, the parent's` : <a href={subAccountLink(sub)}>{named}</a>}
      <span class="sub-line mono">{actor.key_id ?? ''}</span>
    </>
  )
}

export function EventsScreen({ search = '' }: { search?: string }) {
  const address = new URLSearchParams(search)
  const targetFromAddress = address.get('target_id') ?? ''
  const subFromAddress = address.get('sub_account_id') ?? ''
  const [type, setType] = useState('')
  const [target, setTarget] = useState(targetFromAddress)
  const [sub, setSub] = useState(subFromAddress)
  const [from, setFrom] = useState('')
  const [to, setTo] = useState('')
  const [filters, setFilters] = useState({ type: '', target: targetFromAddress, sub: subFromAddress, from: '', to: '' })
  const [page, setPage] = useState<Page<AuditEvent> | null>(null)
  const [shown, setShown] = useState<AuditEvent | null>(null)
  const pager = usePager()
  const load = useAction()

  useEffect(() => {
    setPage(null)
    load.run(async (current) => {
      const next = await api<Page<AuditEvent>>(
        'GET',
        `/events${query({
          type: filters.type,
          target_id: filters.target,
          sub_account_id: filters.sub,
          since: filters.from === '' ? '' : `${filters.from}T00:00:00Z`,
          until: filters.to === '' ? '' : dayAfter(filters.to),
          limit: 25,
          cursor: pager.cursor,
          expand: 'actor',
        })}`,
      )
      if (!current()) return
      setPage(next)
      announce(`${next.data.length} event${next.data.length === 1 ? '' : 's'} shown`)
    })
  }, [filters, pager.cursor])

  return (
    <section aria-labelledby="events-title">
      <h1 id="events-title">Audit log</h1>
      <form
        class="filters"
        onSubmit={(e) => {
          e.preventDefault()
          pager.reset()
          setFilters({ type, target: target.trim(), sub: sub.trim(), from, to })
        }}
      >
        <div class="field">
          <label for="event-type">Type</label>
          <select id="event-type" value={type} onChange={(e) => setType(e.currentTarget.value)}>
            <option value="">Any</option>
            {TYPES.map((t) => (
              <option key={t} value={t}>
                {t}
              </option>
            ))}
          </select>
        </div>
        <div class="field">
          <label for="event-target">Target id</label>
          <input id="event-target" class="mono" value={target} onInput={(e) => setTarget(e.currentTarget.value)} />
        </div>
        <div class="field">
          <label for="event-sub">Sub-account id (with its keys)</label>
          <input id="event-sub" class="mono" value={sub} onInput={(e) => setSub(e.currentTarget.value)} />
        </div>
        <div class="field">
          <label for="event-from">From (UTC date)</label>
          <input id="event-from" type="date" value={from} onInput={(e) => setFrom(e.currentTarget.value)} />
        </div>
        <div class="field">
          <label for="event-to">To (UTC date, included)</label>
          <input id="event-to" type="date" value={to} onInput={(e) => setTo(e.currentTarget.value)} />
        </div>
        <button type="submit">Filter</button>
      </form>
      <ListStates
        error={load.error}
        rows={page?.data ?? null}
        what="events"
        empty="No event matches."
        table={(rows) => (
          <CardTable
            testId="events"
            caption="Events, newest first"
            columns={['When', 'Type', 'Target', 'By', 'Details']}
          >
            {rows.map((e) => (
              <tr key={e.id} data-type={e.type} data-target={e.target.id}>
                <td data-label="When">{formatTime(e.created_at)}</td>
                <td data-label="Type" class="mono">
                  {e.type}
                </td>
                <td data-label="Target" data-testid="event-target">
                  {e.target.type === 'sub_account' ? (
                    <a href={`#/sub-accounts/${e.target.id}`}>{targetName(e) ?? e.target.id}</a>
                  ) : (
                    <>
                      {e.target.type.replace('_', ' ')} {targetName(e) ?? ''}
                    </>
                  )}
                  <span class="sub-line mono">{e.target.id}</span>
                </td>
                <td data-label="By" data-testid="event-actor">
                  <Actor actor={e.actor} />
                </td>
                <td data-label="Details" class="row-actions">
                  <button type="button" class="secondary small" onClick={() => setShown(e)}>
                    Data
                    <span class="visually-hidden">
                      {' '}
                      of {e.type} at {formatTime(e.created_at)}
                    </span>
                  </button>
                </td>
              </tr>
            ))}
          </CardTable>
        )}
      />
      {page !== null && <Pager pager={pager} nextCursor={page.next_cursor} label="Events" />}
      {shown !== null && (
        <Dialog title={`${shown.type}, ${formatTime(shown.created_at)}`} onClose={() => setShown(null)} wide>
          <p class="mono sub-line">{shown.id}</p>
          <EventData event={shown} />
        </Dialog>
      )}
    </section>
  )
}
