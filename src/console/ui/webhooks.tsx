// Webhook endpoints: create (the event types picked from the catalogue; the signing secret shown
// once), list, edit (webhook-edit.tsx), a test send, delete, and one endpoint's deliveries
// (webhook-deliveries.tsx).
import { useEffect, useState } from 'preact/hooks'
import { api, type Page, query } from './api.js'
import {
  announce,
  Confirmation,
  Dialog,
  doneAt,
  ErrorMessage,
  formatTime,
  Pager,
  SecretField,
  usePager,
  useAction,
} from './components.js'
import { CardTable, ListStates } from './list-table.js'
import { EventTypesFieldset } from './event-type-picker.js'
import type { WebhookEndpoint } from './types.js'
import { Deliveries } from './webhook-deliveries.js'
import { EditEndpoint } from './webhook-edit.js'
export function WebhooksScreen() {
  const [page, setPage] = useState<Page<WebhookEndpoint> | null>(null)
  const [secret, setSecret] = useState<string | null>(null)
  const [selected, setSelected] = useState<WebhookEndpoint | null>(null)
  const [editing, setEditing] = useState<WebhookEndpoint | null>(null)
  const [reload, setReload] = useState(0)
  // What the last test send did, shown under the list (and said in the live region).
  const [tested, setTested] = useState<string | null>(null)
  // A delivery listed after a test send or a resend: the deliveries read again.
  const [deliveriesShown, setDeliveriesShown] = useState(0)
  const pager = usePager()
  const load = useAction()
  const change = useAction()

  useEffect(() => {
    load.run(async (current) => {
      const next = await api<Page<WebhookEndpoint>>(
        'GET',
        `/webhook-endpoints${query({ limit: 20, cursor: pager.cursor })}`,
      )
      if (!current()) return
      setPage(next)
      announce(`${next.data.length} webhook endpoint${next.data.length === 1 ? '' : 's'} shown`)
    })
  }, [pager.cursor, reload])

  const create = (e: Event) => {
    e.preventDefault()
    const formElement = e.currentTarget as HTMLFormElement
    const form = new FormData(formElement)
    const description = String(form.get('description') ?? '').trim()
    change.run(async () => {
      const created = await api<WebhookEndpoint & { secret: string }>('POST', '/webhook-endpoints', {
        url: String(form.get('url') ?? '').trim(),
        event_types: form.getAll('event_types').map(String),
        ...(description === '' ? {} : { description }),
      })
      formElement.reset()
      setSecret(created.secret)
      setReload((n) => n + 1)
    }, 'Endpoint created: its secret is shown once')
  }
  const sendTest = (endpoint: WebhookEndpoint) => {
    setTested(null)
    change.run(async () => {
      const sent = await api<{ event_id: string }>('POST', `/webhook-endpoints/${endpoint.id}/test`)
      setTested(doneAt(`Test event ${sent.event_id} queued for ${endpoint.url}`))
      setSelected(endpoint)
      setDeliveriesShown((n) => n + 1)
    }, `Test event queued for ${endpoint.url}`)
  }
  const remove = (endpoint: WebhookEndpoint) =>
    change.runIfConfirmed(
      `Delete the endpoint ${endpoint.url}? Nothing more is sent to it.`,
      async () => {
        await api('DELETE', `/webhook-endpoints/${endpoint.id}`)
        if (selected?.id === endpoint.id) setSelected(null)
        if (editing?.id === endpoint.id) setEditing(null)
        setReload((n) => n + 1)
      },
      'Endpoint deleted',
    )

  return (
    <section aria-labelledby="webhooks-title">
      <h1 id="webhooks-title">Webhook endpoints</h1>
      <form class="card" onSubmit={create} aria-labelledby="new-endpoint-title">
        <h2 id="new-endpoint-title">New endpoint</h2>
        <div class="field">
          <label for="endpoint-url">URL (https)</label>
          <input id="endpoint-url" name="url" type="url" required class="mono" />
        </div>
        <EventTypesFieldset idPrefix="endpoint" />
        <div class="field">
          <label for="endpoint-description">Description (optional)</label>
          <input id="endpoint-description" name="description" maxLength={500} />
        </div>
        <button type="submit" disabled={change.busy}>
          Create endpoint
        </button>
      </form>
      <ErrorMessage error={change.error} />
      <ListStates
        error={load.error}
        rows={page?.data ?? null}
        what="webhook endpoints"
        empty="No webhook endpoints yet."
        table={(rows) => (
          <CardTable
            testId="endpoints"
            caption="Webhook endpoints"
            columns={['URL', 'Events', 'Status', 'Created', 'Actions']}
          >
            {rows.map((w) => (
              <tr key={w.id}>
                <td data-label="URL">
                  <span class="mono">{w.url}</span>
                  {w.description !== null && <span class="description">{w.description}</span>}
                </td>
                <td data-label="Events" class="mono">
                  {w.event_types.join(' ')}
                </td>
                <td data-label="Status">
                  <span class={`badge ${w.status}`}>{w.status}</span>
                  {w.disabled_reason !== null && ` (${w.disabled_reason})`}
                </td>
                <td data-label="Created">{formatTime(w.created_at)}</td>
                <td data-label="Actions" class="row-actions">
                  <button type="button" onClick={() => setSelected(w)} aria-pressed={selected?.id === w.id}>
                    Deliveries<span class="visually-hidden"> to {w.url}</span>
                  </button>
                  <button type="button" onClick={() => setEditing(w)} aria-pressed={editing?.id === w.id}>
                    Edit<span class="visually-hidden"> {w.url}</span>
                  </button>
                  {w.status === 'active' && (
                    <button type="button" disabled={change.busy} onClick={() => sendTest(w)}>
                      Send test event<span class="visually-hidden"> to {w.url}</span>
                    </button>
                  )}
                  <button type="button" class="danger" disabled={change.busy} onClick={() => remove(w)}>
                    Delete<span class="visually-hidden"> {w.url}</span>
                  </button>
                </td>
              </tr>
            ))}
          </CardTable>
        )}
      />
      {page !== null && <Pager pager={pager} nextCursor={page.next_cursor} label="Endpoints" />}
      <Confirmation text={change.error === null ? tested : null} testId="test-sent" />
      {editing !== null && (
        <EditEndpoint
          key={editing.id}
          endpoint={editing}
          onSaved={(changed) => {
            setEditing(changed)
            if (selected?.id === changed.id) setSelected(changed)
            setReload((n) => n + 1)
          }}
          onCancel={() => setEditing(null)}
        />
      )}
      {selected !== null && <Deliveries key={`${selected.id}-${deliveriesShown}`} endpoint={selected} />}
      {secret !== null && (
        <Dialog
          title="Endpoint created"
          onClose={() => {
            setSecret(null)
            announce('The secret is no longer shown')
          }}
        >
          <p>
            Copy the signing secret now: it is shown <strong>only this once</strong>.
          </p>
          <SecretField id="secret-webhook" label="Signing secret" value={secret} />
        </Dialog>
      )}
    </section>
  )
}
