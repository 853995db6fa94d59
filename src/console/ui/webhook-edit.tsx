// Changing a webhook endpoint (PATCH …/webhook-endpoints/{id}): its URL, event types, description
// and status (disabled by its parent, or enabled again after a 410 or days of failures). Only what
// was changed is sent, so that the event the API writes names just that; the secret stays.
import { useState } from 'preact/hooks'
import { api } from './api.js'
import { Confirmation, doneAt, ErrorMessage, useAction } from './components.js'
import { EventTypesFieldset } from './event-type-picker.js'
import { describedBy, errorsByField, FieldErrors } from './field-errors.js'
import type { WebhookEndpoint } from './types.js'

const SUBJECTS = { url: 'The URL', event_types: 'The event types', description: 'The description', status: 'Status' }

/** The members of the form that differ from the endpoint: the PATCH body, empty when nothing changed. */
function changesOf(endpoint: WebhookEndpoint, form: FormData): Record<string, unknown> {
  const url = String(form.get('url') ?? '').trim()
  const types = form.getAll('event_types').map(String)
  const text = String(form.get('description') ?? '').trim()
  const description = text === '' ? null : text
  const status = String(form.get('status') ?? endpoint.status)
  const body: Record<string, unknown> = {}
  if (url !== endpoint.url) body.url = url
  if (JSON.stringify(types) !== JSON.stringify(endpoint.event_types)) body.event_types = types
  if (description !== endpoint.description) body.description = description
  if (status !== endpoint.status) body.status = status
  return body
}

export function EditEndpoint({
  endpoint,
  onSaved,
  onCancel,
}: {
  endpoint: WebhookEndpoint
  onSaved: (changed: WebhookEndpoint) => void
  onCancel: () => void
}) {
  const action = useAction()
  const [saved, setSaved] = useState<string | null>(null)
  const errors = errorsByField(action.error, '/body', SUBJECTS)
  const submit = (e: Event) => {
    e.preventDefault()
    const body = changesOf(endpoint, new FormData(e.currentTarget as HTMLFormElement))
    setSaved(null)
    if (Object.keys(body).length === 0) {
      setSaved('Nothing changed: nothing sent')
      return
    }
    action.run(async () => {
      const changed = await api<WebhookEndpoint>('PATCH', `/webhook-endpoints/${endpoint.id}`, body)
      setSaved(doneAt('Endpoint saved'))
      onSaved(changed)
    }, 'Endpoint saved')
  }
  return (
    <form class="card" onSubmit={submit} aria-labelledby="edit-endpoint-title" data-testid="edit-endpoint">
      <h2 id="edit-endpoint-title">
        Edit <span class="mono">{endpoint.url}</span>
      </h2>
      <div class="field">
        <label for="edit-endpoint-url">URL (https)</label>
        <input
          id="edit-endpoint-url"
          name="url"
          type="url"
          required
          class="mono"
          defaultValue={endpoint.url}
          aria-invalid={errors.has('url') || undefined}
          aria-describedby={describedBy(errors.has('url') && 'edit-endpoint-url-error')}
        />
        <FieldErrors id="edit-endpoint-url-error" messages={errors.get('url')} />
      </div>
      <EventTypesFieldset idPrefix="edit-endpoint" checked={endpoint.event_types} />
      <div class="field">
        <label for="edit-endpoint-description">Description (optional)</label>
        <input
          id="edit-endpoint-description"
          name="description"
          maxLength={500}
          defaultValue={endpoint.description ?? ''}
        />
      </div>
      <div class="field">
        <label for="edit-endpoint-status">Status</label>
        <select
          id="edit-endpoint-status"
          name="status"
          defaultValue={endpoint.status}
          aria-describedby="edit-endpoint-status-help"
        >
          <option value="active">Active: events are sent to it</option>
          <option value="disabled">Disabled: nothing is sent to it</option>
        </select>
        <span id="edit-endpoint-status-help" class="help hint">
          Disabling cancels the deliveries still pending. Enabling again sends the events from then on, not those
          missed: send one again from the deliveries.
          {endpoint.disabled_reason !== null && ` Disabled now: ${endpoint.disabled_reason}.`}
        </span>
      </div>
      <ErrorMessage error={action.error} />
      <div class="actions">
        <button type="submit" disabled={action.busy}>
          Save endpoint
        </button>
        <button type="button" class="secondary" onClick={onCancel}>
          Cancel
        </button>
      </div>
      <Confirmation text={action.error === null ? saved : null} testId="endpoint-saved" />
    </form>
  )
}
