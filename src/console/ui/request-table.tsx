// The request log's table, a record's details and the filter fields, shared by the console's Requests
// screen and the portal's (docs/console.md, docs/portal.md): newest first, each record's time opening its details.
// The screen says how a record's sub-account and key are shown (the console links them; the portal
// names the key by its name and prefix).
import { type ComponentChildren, Fragment } from 'preact'
import { Dialog } from './components.js'
import { CardTable } from './list-table.js'
import type { RequestRecord } from './types.js'

/** To the millisecond: requests a second apart are the norm here. */
export function formatInstant(value: string): string {
  const ms = Date.parse(value)
  return Number.isNaN(ms) ? value : new Date(ms).toISOString().replace('T', ' ').replace('Z', ' UTC')
}

export function formatDuration(ms: number): string {
  return `${ms < 10 ? ms.toFixed(2) : ms.toFixed(0)} ms`
}

/** How a screen shows a record's key, and its sub-account (absent: no such column). */
export interface RecordColumns {
  key: (record: RequestRecord) => ComponentChildren
  tenant?: (record: RequestRecord) => ComponentChildren
}

export function RequestTable({
  records,
  columns,
  onOpen,
  testId,
}: {
  records: readonly RequestRecord[]
  columns: RecordColumns
  onOpen: (record: RequestRecord) => void
  testId: string
}) {
  return (
    <CardTable
      testId={testId}
      caption="Requests, newest first"
      columns={[
        'Time',
        'Method',
        'Path',
        'Status',
        'Code',
        'Duration',
        columns.tenant !== undefined && 'Sub-account',
        'Key',
      ]}
    >
      {records.map((r) => (
        <tr key={r.id} data-request-id={r.id} data-status={r.status} data-tenant={r.tenant_id}>
          <td data-label="Time">
            <button type="button" class="link open-details" onClick={() => onOpen(r)}>
              {formatInstant(r.time)}
              <span class="visually-hidden">: details of {r.id}</span>
            </button>
          </td>
          <td data-label="Method" class="mono">
            {r.method}
          </td>
          <td data-label="Path" class="mono path">
            {r.path}
          </td>
          <td data-label="Status">{r.status}</td>
          <td data-label="Code" class="mono">
            {r.code ?? '—'}
          </td>
          <td data-label="Duration">{formatDuration(r.duration_ms)}</td>
          {columns.tenant !== undefined && <td data-label="Sub-account">{columns.tenant(r)}</td>}
          <td data-label="Key">{columns.key(r)}</td>
        </tr>
      ))}
    </CardTable>
  )
}

/**
 * The id of route-list.ts's CONSOLE_TRACE_URL_ELEMENT (spelled here: the bundle takes nothing from
 * the server's modules but their types): TRACE_URL_TEMPLATE as the page came with it.
 */
const TRACE_URL_ELEMENT = 'gateway-trace-url'

/** TRACE_URL_TEMPLATE, or null when unset (or on a page without it, the portal's). */
function traceUrlTemplate(): string | null {
  try {
    const value: unknown = JSON.parse(document.getElementById(TRACE_URL_ELEMENT)?.textContent ?? 'null')
    return typeof value === 'string' ? value : null
  } catch {
    return null
  }
}

/** A trace id, linked to its trace when TRACE_URL_TEMPLATE is set. */
function TraceId({ id }: { id: string }) {
  const template = traceUrlTemplate()
  if (template === null) return <span class="mono">{id}</span>
  return (
    <a class="mono" href={template.replaceAll('{trace_id}', encodeURIComponent(id))} rel="noreferrer" target="_blank">
      {id}
    </a>
  )
}

/** A record's facts in a dialog: `facts` adds a screen's own (the console's account and tenant). */
export function RequestDetails({
  record: r,
  keyFact,
  facts = [],
  onClose,
  children,
}: {
  record: RequestRecord
  /** The key, as the screen names it: `['Key id', id]`, `['Key', 'ci (tgw_ab12…)']`. */
  keyFact: [string, string]
  facts?: readonly [string, string][]
  onClose: () => void
  children?: ComponentChildren
}) {
  const all: [string, string][] = [
    ['Request id', r.id],
    ['Time', formatInstant(r.time)],
    ['Method', r.method],
    ['Path', r.path],
    ['Route', r.route === 'management' ? 'management API' : r.route],
    ['Status', String(r.status)],
    ['Problem code', r.code ?? '—'],
    ['Duration', formatDuration(r.duration_ms)],
    ['Request bytes', String(r.request_bytes)],
    ['Response bytes', String(r.response_bytes)],
    ['Source IP', r.source_ip],
    ...facts,
    keyFact,
  ]
  // Shadow limits are tried before they are enforced: what they would have refused is news.
  if (r.would_refuse !== undefined) all.push(['Shadow limits that would refuse it', r.would_refuse.join(', ')])
  const shown: [string, ComponentChildren][] = all
  if (r.trace_id !== undefined) shown.push(['Trace', <TraceId id={r.trace_id} />])
  return (
    <Dialog title={`${r.method} ${r.path}`} onClose={onClose}>
      <dl class="facts" data-testid="request-details">
        {shown.map(([name, value]) => (
          <Fragment key={name}>
            <dt>{name}</dt>
            <dd>{value}</dd>
          </Fragment>
        ))}
      </dl>
      {children}
    </Dialog>
  )
}

/** What a filter field's input calls: the screen's setter of that filter. */
type SetFilter = (name: 'status' | 'code' | 'since' | 'until') => (e: { currentTarget: { value: string } }) => void

const STATUS_CLASSES = ['2xx', '3xx', '4xx', '5xx']

/** The status and problem-code filters, as both request logs take them (`idPrefix`: the screen's). */
export function StatusCodeFields({
  idPrefix,
  status,
  code,
  set,
}: {
  idPrefix: string
  status: string
  code: string
  set: SetFilter
}) {
  return (
    <>
      <div class="field">
        <label for={`${idPrefix}-status`}>Status (404, or 4xx)</label>
        <input id={`${idPrefix}-status`} list={`${idPrefix}-status-classes`} value={status} onInput={set('status')} />
        <datalist id={`${idPrefix}-status-classes`}>
          {STATUS_CLASSES.map((c) => (
            <option key={c} value={c} />
          ))}
        </datalist>
      </div>
      <div class="field">
        <label for={`${idPrefix}-code`}>Problem code</label>
        <input id={`${idPrefix}-code`} class="mono" placeholder="rate_limited" value={code} onInput={set('code')} />
      </div>
    </>
  )
}

/** The time filters, in UTC as every time the pages show; `until` is not included. */
export function TimeRangeFields({
  idPrefix,
  since,
  until,
  set,
}: {
  idPrefix: string
  since: string
  until: string
  set: SetFilter
}) {
  return (
    <>
      <div class="field">
        <label for={`${idPrefix}-since`}>Since (UTC)</label>
        <input id={`${idPrefix}-since`} type="datetime-local" step={1} value={since} onInput={set('since')} />
      </div>
      <div class="field">
        <label for={`${idPrefix}-until`}>Until (UTC, not included)</label>
        <input id={`${idPrefix}-until`} type="datetime-local" step={1} value={until} onInput={set('until')} />
      </div>
    </>
  )
}
