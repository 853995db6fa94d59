// An event's data made readable: its object's fields a row, each with what it was before when the
// change touched it, and the whole event as pretty JSON on demand; and a webhook delivery's body as
// the receiver got it. Everything is text: values from the API never become markup.
import type { AuditEvent } from './types.js'

/** A value as one line of text: a string as it is, anything else as compact JSON (`null`, `["a"]`). */
function valueText(value: unknown): string {
  return typeof value === 'string' ? value : JSON.stringify(value)
}

/** The body a webhook delivery of `event` carries (webhooks/deliver.ts makes the same), pretty-printed. */
export function deliveredBody(event: AuditEvent): string {
  return JSON.stringify({ type: event.type, timestamp: event.created_at, data: event }, null, 2)
}

/**
 * The event's `data.object` as a table (field, value, and the value before the change when
 * `data.previous` has it), the request's id and address under it, and the raw event folded away.
 */
export function EventData({ event }: { event: AuditEvent }) {
  const object = event.data.object
  const previous = event.data.previous ?? {}
  // Fields the change removed are in `previous` only: list them too.
  const fields = [...new Set([...Object.keys(object), ...Object.keys(previous)])]
  const changed = (field: string) => Object.hasOwn(previous, field)
  return (
    <div class="event-data" data-testid="event-data">
      <table class="kv">
        <caption class="visually-hidden">Fields of the event's object</caption>
        <thead>
          <tr>
            <th scope="col">Field</th>
            <th scope="col">Value</th>
            <th scope="col">Before</th>
          </tr>
        </thead>
        <tbody>
          {fields.map((field) => (
            <tr key={field} class={changed(field) ? 'changed' : undefined} data-field={field}>
              <th scope="row" class="mono">
                {field}
                {changed(field) && <span class="sub-line">changed</span>}
              </th>
              <td class="mono">{Object.hasOwn(object, field) ? valueText(object[field]) : '(removed)'}</td>
              <td class="mono">{changed(field) ? valueText(previous[field]) : ''}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <p class="help">
        {event.data.previous === null ? 'No earlier values: the event made it, or is an alert or a test.' : ''}
        {event.data.previous !== null && 'Rows with a value under Before are what the change touched.'} Request{' '}
        <span class="mono">{event.request_id ?? 'none'}</span>, from{' '}
        <span class="mono">{event.source_ip ?? 'no address (the operator or the gateway)'}</span>.
      </p>
      <details>
        <summary>The event as JSON</summary>
        <pre class="json" data-testid="event-json">
          {JSON.stringify(event, null, 2)}
        </pre>
      </details>
    </div>
  )
}
