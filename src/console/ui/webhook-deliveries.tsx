// One webhook endpoint's deliveries: paged, each sent again on demand, and the body its receiver
// got shown as it was sent (event-data.ts).
import { useEffect, useState } from 'preact/hooks'
import { api, type Page, query } from './api.js'
import {
  announce,
  Confirmation,
  Dialog,
  doneAt,
  ErrorMessage,
  formatTime,
  Loading,
  Pager,
  usePager,
  useAction,
} from './components.js'
import { CardTable, ListStates } from './list-table.js'
import { deliveredBody } from './event-data.js'
import type { AuditEvent, Delivery, WebhookEndpoint } from './types.js'

export function Deliveries({ endpoint }: { endpoint: WebhookEndpoint }) {
  const [page, setPage] = useState<Page<Delivery> | null>(null)
  const [reload, setReload] = useState(0)
  const [resent, setResent] = useState<string | null>(null)
  const [payloadOf, setPayloadOf] = useState<Delivery | null>(null)
  const pager = usePager()
  const load = useAction()
  const resend = useAction()
  const sendAgain = (d: Delivery) => {
    setResent(null)
    resend.run(async () => {
      const done = await api<{ attempt: number; queued: boolean }>(
        'POST',
        `/webhook-endpoints/${endpoint.id}/deliveries/${encodeURIComponent(d.event_id)}/retry`,
      )
      setResent(
        doneAt(
          done.queued
            ? `${d.event_type} ${d.event_id} queued again (attempt ${done.attempt})`
            : `An attempt at ${d.event_id} is under way already`,
        ),
      )
      setReload((n) => n + 1)
    }, `Event ${d.event_id} queued again`)
  }
  useEffect(() => {
    setPage(null)
    load.run(async (current) => {
      const next = await api<Page<Delivery>>(
        'GET',
        `/webhook-endpoints/${endpoint.id}/deliveries${query({ limit: 20, cursor: pager.cursor })}`,
      )
      if (!current()) return
      setPage(next)
      announce(`${next.data.length} deliver${next.data.length === 1 ? 'y' : 'ies'} shown`)
    })
  }, [endpoint.id, pager.cursor, reload])
  return (
    <section class="card" aria-labelledby="deliveries-title" data-testid="deliveries">
      <h2 id="deliveries-title">
        Deliveries to <span class="mono">{endpoint.url}</span>
      </h2>
      <ListStates
        error={load.error}
        rows={page?.data ?? null}
        what="deliveries"
        empty="No delivery yet."
        table={(rows) => (
          <CardTable
            testId="deliveries-table"
            columns={['Event', 'Type', 'Attempt', 'Status', 'Error', 'Duration', 'At', 'Next attempt', 'Actions']}
          >
            {rows.map((d, i) => (
              <tr key={`${d.event_id}-${d.attempt}`} data-event-id={d.event_id}>
                <td data-label="Event" class="mono">
                  {d.event_id}
                </td>
                <td data-label="Type" class="mono">
                  {d.event_type}
                </td>
                <td data-label="Attempt">{d.attempt}</td>
                <td data-label="Status">{d.status ?? '—'}</td>
                <td data-label="Error">{d.error ?? '—'}</td>
                <td data-label="Duration">{d.duration_ms} ms</td>
                <td data-label="At">{formatTime(d.attempted_at)}</td>
                <td data-label="Next attempt">{formatTime(d.next_attempt_at)}</td>
                <td data-label="Actions" class="row-actions">
                  {/* One button of each an event, on its newest attempt (the list is newest first). */}
                  {rows.findIndex((o) => o.event_id === d.event_id) === i && (
                    <button type="button" class="secondary" onClick={() => setPayloadOf(d)}>
                      Payload<span class="visually-hidden"> of {d.event_id}</span>
                    </button>
                  )}
                  {endpoint.status === 'active' && rows.findIndex((o) => o.event_id === d.event_id) === i && (
                    <button type="button" disabled={resend.busy} onClick={() => sendAgain(d)}>
                      Send again<span class="visually-hidden"> {d.event_id}</span>
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </CardTable>
        )}
      />
      <ErrorMessage error={resend.error} />
      <Confirmation text={resend.error === null ? resent : null} testId="resent" />
      {page !== null && <Pager pager={pager} nextCursor={page.next_cursor} label="Deliveries" />}
      {payloadOf !== null && <Payload delivery={payloadOf} onClose={() => setPayloadOf(null)} />}
    </section>
  )
}

/**
 * What the receiver got for a delivery: the body, made from the event (`GET /events/{id}`) as the
 * worker makes it, pretty-printed as text. An event past the audit log's retention is gone: said.
 */
function Payload({ delivery, onClose }: { delivery: Delivery; onClose: () => void }) {
  const [event, setEvent] = useState<AuditEvent | null>(null)
  const load = useAction()
  useEffect(() => {
    load.run(async (current) => {
      const read = await api<AuditEvent>('GET', `/events/${encodeURIComponent(delivery.event_id)}`)
      if (current()) setEvent(read)
    })
  }, [delivery.event_id])
  return (
    <Dialog title={`Payload of ${delivery.event_type}`} onClose={onClose} wide>
      <p>
        The body of every attempt at <span class="mono">{delivery.event_id}</span>, as its receiver got it (signed; its{' '}
        <span class="mono">webhook-id</span> header is the event id).
      </p>
      <ErrorMessage error={load.error} />
      {event === null && load.error === null && <Loading what="the payload" />}
      {event !== null && (
        <pre class="json" data-testid="payload">
          {deliveredBody(event)}
        </pre>
      )}
    </Dialog>
  )
}
