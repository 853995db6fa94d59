// The audit log: newest first, filtered by type (one, or a resource's `*`) and target id, paged.
import { useEffect, useState } from 'preact/hooks'
import { api, type Page, query } from './api.js'
import { announce, Empty, ErrorMessage, formatTime, Loading, Pager, usePager, useAction } from './components.js'
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
  'account.*',
  'account.limits_updated',
  'account.scopes_updated',
  'webhook_endpoint.*',
  'webhook_endpoint.created',
  'webhook_endpoint.deleted',
  'webhook_endpoint.test',
  'usage.*',
  'usage.threshold_reached',
  'rate_limit.*',
  'rate_limit.exceeded',
]

export function EventsScreen() {
  const [type, setType] = useState('')
  const [target, setTarget] = useState('')
  const [filters, setFilters] = useState({ type: '', target: '' })
  const [page, setPage] = useState<Page<AuditEvent> | null>(null)
  const pager = usePager()
  const load = useAction()

  useEffect(() => {
    setPage(null)
    load.run(async (current) => {
      const next = await api<Page<AuditEvent>>(
        'GET',
        `/events${query({ type: filters.type, target_id: filters.target, limit: 25, cursor: pager.cursor })}`,
      )
      if (!current()) return
      setPage(next)
      announce(`${next.data.length} event${next.data.length === 1 ? '' : 's'} shown`)
    })
  }, [filters.type, filters.target, pager.cursor])

  return (
    <section aria-labelledby="events-title">
      <h1 id="events-title">Audit log</h1>
      <form
        class="filters"
        onSubmit={(e) => {
          e.preventDefault()
          pager.reset()
          setFilters({ type, target: target.trim() })
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
        <button type="submit">Filter</button>
      </form>
      <ErrorMessage error={load.error} />
      {page === null && load.error === null && <Loading what="events" />}
      {page !== null && page.data.length === 0 && <Empty>No event matches.</Empty>}
      {page !== null && page.data.length > 0 && (
        <div class="table-wrap">
          <table class="cards" data-testid="events">
            <caption class="visually-hidden">Events, newest first</caption>
            <thead>
              <tr>
                <th scope="col">When</th>
                <th scope="col">Type</th>
                <th scope="col">Target</th>
                <th scope="col">By</th>
                <th scope="col">Details</th>
              </tr>
            </thead>
            <tbody>
              {page.data.map((e) => (
                <tr key={e.id} data-type={e.type} data-target={e.target.id}>
                  <td data-label="When">{formatTime(e.created_at)}</td>
                  <td data-label="Type" class="mono">
                    {e.type}
                  </td>
                  <td data-label="Target">
                    {e.target.type === 'sub_account' ? (
                      <a href={`#/sub-accounts/${e.target.id}`} class="mono">
                        {e.target.id}
                      </a>
                    ) : (
                      <span class="mono">
                        {e.target.type} {e.target.id}
                      </span>
                    )}
                  </td>
                  <td data-label="By">{e.actor.type === 'api_key' ? `key ${e.actor.key_id ?? ''}` : e.actor.type}</td>
                  <td data-label="Details">
                    <details>
                      <summary>
                        Data<span class="visually-hidden"> of {e.id}</span>
                      </summary>
                      <pre>
                        {JSON.stringify({ request_id: e.request_id, source_ip: e.source_ip, data: e.data }, null, 2)}
                      </pre>
                    </details>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {page !== null && <Pager pager={pager} nextCursor={page.next_cursor} label="Events" />}
    </section>
  )
}
