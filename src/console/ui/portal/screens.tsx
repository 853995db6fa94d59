// The portal's screens (docs/portal.md): the sub-account's keys (the console's KeyManager on the
// portal's API), this month's usage and quota, and its request log, newest first.
import { useEffect, useState } from 'preact/hooks'
import { query } from '../api.js'
import { announce, Empty, ErrorMessage, Loading, Pager, usePager, useAction } from '../components.js'
import { KeyManager, type KeysClient } from '../keys.js'
import { fromUtcField } from '../request-filters.js'
import { RequestDetails, RequestTable, StatusCodeFields, TimeRangeFields } from '../request-table.js'
import { describeMeterLimits } from '../limits.js'
import { unitsText } from '../units.js'
import type { KeyPolicy, RequestRecord } from '../types.js'
import { type ApiKey, type MintedKey, type Page, type PortalUsage, portalApi } from './api.js'

const portalKeys: KeysClient = {
  list: (cursor) => portalApi<Page<ApiKey>>('GET', `/keys${query({ limit: 20, cursor })}`),
  mint: (body) => portalApi<MintedKey>('POST', '/keys', body),
  roll: (keyId, seconds) => portalApi<MintedKey>('POST', `/keys/${keyId}/roll`, { expires_in_seconds: seconds }),
  revoke: (keyId) => portalApi('POST', `/keys/${keyId}/revoke`),
  requestsOf: () => null,
}

// A session that may not mint is not shown the key policy. The provider's scope ceiling is not
// shown either: the API holds a mint to it, and its refusal is shown beside the field it names.
const UNSHOWN_POLICY: KeyPolicy = { allowed_scopes: null, max_ttl_seconds: null, ip_allowlist: null }

export function KeysScreen({
  canRead,
  canWrite,
  policy = UNSHOWN_POLICY,
}: {
  canRead: boolean
  canWrite: boolean
  /** The sub-account's key policy (the session's, with keys:write): the mint form offers within it. */
  policy?: KeyPolicy | undefined
}) {
  return (
    <div>
      <h1>API keys</h1>
      <p class="help">
        {canWrite
          ? 'Mint keys for your applications, roll them, and revoke the ones you no longer use. A new key is shown once.'
          : 'The keys of this account.'}
      </p>
      <KeyManager
        client={portalKeys}
        policy={policy}
        canRead={canRead}
        canWrite={canWrite}
        askBeforeRoll
        forCustomer
        title={canRead ? 'Your keys' : 'New keys'}
      />
    </div>
  )
}

export function UsageScreen() {
  const [usage, setUsage] = useState<PortalUsage | null>(null)
  const load = useAction()
  useEffect(() => {
    load.run(async (current) => {
      const read = await portalApi<PortalUsage>('GET', '/usage')
      if (!current()) return
      setUsage(read)
      announce(`This month: ${read.used} request units`)
    })
  }, [])
  const quota = usage?.limits.monthly_quota?.requests ?? null
  const days = usage?.usage?.days.filter((d) => d.requests > 0) ?? []
  return (
    <section aria-labelledby="portal-usage-title">
      <h1 id="portal-usage-title">Usage</h1>
      <ErrorMessage error={load.error} />
      {usage === null && load.error === null && <Loading what="usage" />}
      {usage !== null && (
        <>
          <div class="card quota" data-testid="portal-quota">
            <p>
              This month ({usage.month}): <strong data-testid="portal-used">{usage.used}</strong> request units
              {quota === null ? ', no monthly quota.' : ` of a quota of ${quota}.`}
            </p>
            {quota !== null && (
              <p>
                <label for="portal-quota-meter">Quota used</label>{' '}
                <meter id="portal-quota-meter" min={0} max={quota} value={usage.used} />{' '}
                {Math.round((usage.used / quota) * 100)}%
              </p>
            )}
            {usage.limits.rate !== null && (
              <p>
                Rate limit: {usage.limits.rate.requests} requests per {usage.limits.rate.per_seconds} s.
              </p>
            )}
            {usage.limits.meters !== undefined && (
              <p data-testid="portal-meter-limits">Limits in units: {describeMeterLimits(usage.limits)}.</p>
            )}
            {usage.usage !== null && (
              <p data-testid="portal-units">Units this month: {unitsText(usage.usage.units)}.</p>
            )}
            {usage.usage !== null && (
              <p data-testid="portal-refused">
                Refused by limits this month: {usage.usage.limited.rate + usage.usage.limited.quota}.
              </p>
            )}
            <p class="help" data-testid="portal-counted">
              The quota counts the requests that reached the API, each at its route's cost (request units); the days
              below count every request made, those refused before the API included.
            </p>
          </div>
          {days.length === 0 ? (
            <Empty>No requests this month yet.</Empty>
          ) : (
            <div class="table-wrap">
              <table class="cards" data-testid="portal-usage-days">
                <caption>Requests by day (UTC) and status</caption>
                <thead>
                  <tr>
                    <th scope="col">Day</th>
                    <th scope="col">Requests</th>
                    <th scope="col">2xx</th>
                    <th scope="col">3xx</th>
                    <th scope="col">4xx</th>
                    <th scope="col">5xx</th>
                    <th scope="col">Refused by limits</th>
                    <th scope="col">Units</th>
                  </tr>
                </thead>
                <tbody>
                  {days.map((d) => (
                    <tr key={d.date}>
                      <th scope="row">{d.date}</th>
                      <td data-label="Requests">{d.requests}</td>
                      <td data-label="2xx">{d.by_status?.['2xx'] ?? 0}</td>
                      <td data-label="3xx">{d.by_status?.['3xx'] ?? 0}</td>
                      <td data-label="4xx">{d.by_status?.['4xx'] ?? 0}</td>
                      <td data-label="5xx">{d.by_status?.['5xx'] ?? 0}</td>
                      <td data-label="Refused by limits">{(d.limited?.rate ?? 0) + (d.limited?.quota ?? 0)}</td>
                      <td data-label="Units">{unitsText(d.units)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </>
      )}
    </section>
  )
}

const PAGE_SIZE = 25

/** The portal's filters of its request log (the portal API's query, `sub_account_id` aside). */
interface PortalRequestFilters {
  status: string
  code: string
  key_id: string
  since: string
  until: string
}
const NO_FILTERS: PortalRequestFilters = { status: '', code: '', key_id: '', since: '', until: '' }

/** A key as the Keys screen shows it: its name and prefix (an id the screen never shows otherwise). */
const keyName = (key: ApiKey) => `${key.name} (${key.prefix}…)`

export function RequestsScreen({ canReadKeys }: { canReadKeys: boolean }) {
  const [filters, setFilters] = useState<PortalRequestFilters>(NO_FILTERS)
  const [page, setPage] = useState<Page<RequestRecord> | null>(null)
  const [chosen, setChosen] = useState<RequestRecord | null>(null)
  const [keys, setKeys] = useState<ApiKey[]>([])
  const [reload, setReload] = useState(0)
  const pager = usePager()
  const load = useAction()
  // The keys' names, where the session may read them (one page: a sub-account has few keys).
  useEffect(() => {
    if (!canReadKeys) return
    portalApi<Page<ApiKey>>('GET', `/keys${query({ limit: 100 })}`)
      .then((read) => setKeys(read.data))
      .catch(() => {})
  }, [canReadKeys])
  useEffect(() => {
    setPage(null)
    load.run(async (current) => {
      const next = await portalApi<Page<RequestRecord>>(
        'GET',
        `/requests${query({
          ...filters,
          since: filters.since === '' ? '' : fromUtcField(filters.since),
          until: filters.until === '' ? '' : fromUtcField(filters.until),
          limit: PAGE_SIZE,
          cursor: pager.cursor,
        })}`,
      )
      if (!current()) return
      setPage(next)
      announce(`${next.data.length} request${next.data.length === 1 ? '' : 's'} shown`)
    })
  }, [pager.cursor, reload, filters])
  const keyOf = (id: string) => {
    const key = keys.find((k) => k.id === id)
    return key === undefined ? `key ${id.slice(0, 8)}…` : keyName(key)
  }
  const rows = page?.data ?? []
  const filtered = Object.values(filters).some((value) => value !== '')
  return (
    <section aria-labelledby="portal-requests-title">
      <h1 id="portal-requests-title">Requests</h1>
      <p class="help">
        The requests made with this account's keys, newest first: never a header, body or query string.
      </p>
      <RequestFilterForm
        filters={filters}
        keys={keys}
        onFilter={(next) => {
          pager.reset()
          setFilters(next)
        }}
      />
      <div class="actions">
        <button
          type="button"
          class="link"
          onClick={() => {
            pager.reset()
            setReload((n) => n + 1)
          }}
        >
          Show the newest
        </button>
      </div>
      <ErrorMessage error={load.error} />
      {page === null && load.error === null && <Loading what="requests" />}
      {page !== null && rows.length === 0 && (
        <Empty>
          {page.next_cursor !== null
            ? 'No request on this page matches these filters: older requests may match on the next page.'
            : filtered
              ? 'No request matches these filters: widen them, or clear them.'
              : 'No request recorded yet: requests are listed about a second after they are answered.'}
        </Empty>
      )}
      {rows.length > 0 && (
        <RequestTable
          records={rows}
          columns={{ key: (r) => keyOf(r.key_id) }}
          onOpen={setChosen}
          testId="portal-requests"
        />
      )}
      {page !== null && <Pager pager={pager} nextCursor={page.next_cursor} label="Requests" />}
      {chosen !== null && (
        <RequestDetails record={chosen} keyFact={['Key', keyOf(chosen.key_id)]} onClose={() => setChosen(null)} />
      )}
    </section>
  )
}

/** The filters, applied when submitted: status (a code or a class), problem code, key, time (UTC). */
function RequestFilterForm({
  filters,
  keys,
  onFilter,
}: {
  filters: PortalRequestFilters
  keys: readonly ApiKey[]
  onFilter: (filters: PortalRequestFilters) => void
}) {
  const [fields, setFields] = useState(filters)
  const set = (name: keyof PortalRequestFilters) => (e: { currentTarget: { value: string } }) =>
    setFields({ ...fields, [name]: e.currentTarget.value })
  return (
    <form
      class="filters"
      aria-label="Request filters"
      onSubmit={(e) => {
        e.preventDefault()
        onFilter(fields)
      }}
    >
      <StatusCodeFields idPrefix="portal-requests" status={fields.status} code={fields.code} set={set} />
      {keys.length > 0 && (
        <div class="field">
          <label for="portal-requests-key">Key</label>
          <select id="portal-requests-key" value={fields.key_id} onChange={set('key_id')}>
            <option value="">Any</option>
            {keys.map((key) => (
              <option key={key.id} value={key.id}>
                {keyName(key)}
              </option>
            ))}
          </select>
        </div>
      )}
      <TimeRangeFields idPrefix="portal-requests" since={fields.since} until={fields.until} set={set} />
      <button type="submit">Filter</button>
      {Object.values(filters).some((value) => value !== '') && (
        <button
          type="button"
          class="link"
          onClick={() => {
            setFields(NO_FILTERS)
            onFilter(NO_FILTERS)
          }}
        >
          Clear the filters
        </button>
      )}
    </form>
  )
}
