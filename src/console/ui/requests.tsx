// Requests: the request log (docs/api.md#request-log), newest first, 25 a page, filtered by what
// the address says (#/requests?sub_account_id=…&status=5xx: request-filters.ts), each record's
// details on demand.
import { useEffect, useMemo, useState } from 'preact/hooks'
import { ApiError, api, type Page, query } from './api.js'
import { announce, Empty, ErrorMessage, Loading, Pager, usePager, useAction } from './components.js'
import { type RecordColumns, RequestDetails, RequestTable, StatusCodeFields, TimeRangeFields } from './request-table.js'
import {
  fromUtcField,
  hasFilters,
  isUuid,
  parseFilters,
  type RequestFilters,
  requestsHash,
  toUtcField,
} from './request-filters.js'
import { servedRoutes } from './routes.js'
import type { RequestRecord } from './types.js'

const PAGE_SIZE = 25

export function RequestsScreen({ search }: { search: string }) {
  const parsed = useMemo(() => parseFilters(search), [search])
  return (
    <section aria-labelledby="requests-title">
      <h1 id="requests-title">Requests</h1>
      <p class="help">
        Every request answered with this account's keys and its sub-accounts' (proxied, refused, or a management call),
        newest first: never a header, body or query string.
      </p>
      <FilterForm filters={parsed.filters} />
      {parsed.invalid.length > 0 ? (
        <ErrorMessage
          error={
            new ApiError({
              status: 0,
              code: 'bad_filter',
              title: 'The address has filters the console cannot use',
              detail: 'Correct them below, or clear the filters.',
              errors: parsed.invalid,
            })
          }
        />
      ) : (
        // A new list for new filters: its pager starts again at the first page.
        <RequestList key={search} filters={parsed.filters} />
      )}
    </section>
  )
}

/** The form edits the address: submitting it sets the hash, which the screen reads. */
function FilterForm({ filters }: { filters: RequestFilters }) {
  const fieldsOf = (f: RequestFilters) => ({ ...f, since: toUtcField(f.since), until: toUtcField(f.until) })
  const [fields, setFields] = useState(fieldsOf(filters))
  // A link or Back changes the address under the form: the form follows.
  useEffect(() => setFields(fieldsOf(filters)), [filters])
  const routes = useMemo(() => {
    const prefixes = ['management', ...servedRoutes().map((r) => r.prefix)]
    return filters.route === '' || prefixes.includes(filters.route) ? prefixes : [...prefixes, filters.route]
  }, [filters.route])
  const set = (name: keyof RequestFilters) => (e: { currentTarget: { value: string } }) =>
    setFields({ ...fields, [name]: e.currentTarget.value })
  // An instant left as the address gave it keeps its milliseconds, which the field cannot show.
  const instant = (name: 'since' | 'until') =>
    fields[name] === toUtcField(filters[name]) ? filters[name] : fromUtcField(fields[name])

  return (
    <form
      class="filters"
      aria-label="Request filters"
      onSubmit={(e) => {
        e.preventDefault()
        location.hash = requestsHash({ ...fields, since: instant('since'), until: instant('until') })
      }}
    >
      <div class="field">
        <label for="requests-sub">Sub-account id</label>
        <input id="requests-sub" class="mono" value={fields.sub_account_id} onInput={set('sub_account_id')} />
      </div>
      <div class="field">
        <label for="requests-key">Key id</label>
        <input id="requests-key" class="mono" value={fields.key_id} onInput={set('key_id')} />
      </div>
      <StatusCodeFields idPrefix="requests" status={fields.status} code={fields.code} set={set} />
      <div class="field">
        <label for="requests-route">Route</label>
        <select id="requests-route" value={fields.route} onChange={set('route')}>
          <option value="">Any</option>
          {routes.map((r) => (
            <option key={r} value={r}>
              {r === 'management' ? 'management API' : r}
            </option>
          ))}
        </select>
      </div>
      <TimeRangeFields idPrefix="requests" since={fields.since} until={fields.until} set={set} />
      <button type="submit">Filter</button>
      {hasFilters(filters) && <a href="#/requests">Clear the filters</a>}
    </form>
  )
}

function RequestList({ filters }: { filters: RequestFilters }) {
  const [page, setPage] = useState<Page<RequestRecord> | null>(null)
  const [chosen, setChosen] = useState<RequestRecord | null>(null)
  const [reload, setReload] = useState(0)
  const pager = usePager()
  const load = useAction()

  useEffect(() => {
    setPage(null)
    load.run(async (current) => {
      const next = await api<Page<RequestRecord>>(
        'GET',
        `/requests${query({ ...filters, limit: PAGE_SIZE, cursor: pager.cursor })}`,
      )
      if (!current()) return
      setPage(next)
      announce(`${next.data.length} request${next.data.length === 1 ? '' : 's'} shown`)
    })
  }, [pager.cursor, reload])

  return (
    <>
      <div class="actions">
        <button
          type="button"
          class="link"
          onClick={() => {
            // The log grows under the screen: back to the newest.
            pager.reset()
            setReload((n) => n + 1)
          }}
        >
          Show the newest
        </button>
      </div>
      <ErrorMessage error={load.error} />
      {page === null && load.error === null && <Loading what="requests" />}
      {page !== null && page.data.length === 0 && (
        <Empty>
          {page.next_cursor !== null ? (
            'No request on this page matches these filters. Each page searches only part of the log: older requests may match on the next page.'
          ) : hasFilters(filters) ? (
            <>
              No request matches these filters: widen them, or <a href="#/requests">clear them</a>.
            </>
          ) : (
            'No request recorded yet. Requests made with a key of this account or of its sub-accounts are listed about a second after they are answered: make one, then choose “Show the newest”. (None ever is where the operator has turned the log off: REQUEST_LOG_RETENTION_DAYS=0.)'
          )}
        </Empty>
      )}
      {page !== null && page.data.length > 0 && (
        <RequestTable records={page.data} columns={CONSOLE_COLUMNS} onOpen={setChosen} testId="requests" />
      )}
      {page !== null && <Pager pager={pager} nextCursor={page.next_cursor} label="Requests" />}
      {chosen !== null && <Details record={chosen} onClose={() => setChosen(null)} />}
    </>
  )
}

/** The console's columns: the tenant a request acted as (its page), and the key's id. */
const CONSOLE_COLUMNS: RecordColumns = {
  tenant: (record) => <TenantOf record={record} />,
  key: (record) => <span class="mono">{record.key_id}</span>,
}

/** The tenant a request acted as: the parent itself, or a sub-account (its page). */
function TenantOf({ record }: { record: RequestRecord }) {
  if (record.tenant_id === record.account_id) return <>the parent</>
  if (!isUuid(record.tenant_id)) return <span class="mono">{record.tenant_id}</span>
  return (
    <a href={`#/sub-accounts/${record.tenant_id}`} class="mono">
      {record.tenant_id}
    </a>
  )
}

function Details({ record: r, onClose }: { record: RequestRecord; onClose: () => void }) {
  return (
    <RequestDetails
      record={r}
      keyFact={['Key id', r.key_id]}
      facts={[
        ['Acted as', r.tenant_id === r.account_id ? `the parent (${r.tenant_id})` : r.tenant_id],
        ['Account', r.account_id],
      ]}
      onClose={onClose}
    >
      {isUuid(r.key_id) && (
        <p>
          <a href={requestsHash({ key_id: r.key_id })}>All requests of this key</a>
        </p>
      )}
    </RequestDetails>
  )
}
