// The portal's screens (docs/portal.md): the sub-account's keys (the console's KeyManager on the
// portal's API), this month's usage and quota, and its request log, newest first.
import { useEffect, useMemo, useState } from 'preact/hooks'
import { query } from '../api.js'
import { announce, Empty, ErrorMessage, formatTime, Loading, Pager, usePager, useAction } from '../components.js'
import { KeyManager, type KeysClient } from '../keys.js'
import { formatDuration } from '../requests.js'
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

export function RequestsScreen() {
  const [page, setPage] = useState<Page<RequestRecord> | null>(null)
  const [reload, setReload] = useState(0)
  const pager = usePager()
  const load = useAction()
  useEffect(() => {
    setPage(null)
    load.run(async (current) => {
      const next = await portalApi<Page<RequestRecord>>(
        'GET',
        `/requests${query({ limit: PAGE_SIZE, cursor: pager.cursor })}`,
      )
      if (!current()) return
      setPage(next)
      announce(`${next.data.length} request${next.data.length === 1 ? '' : 's'} shown`)
    })
  }, [pager.cursor, reload])
  const rows = useMemo(() => page?.data ?? [], [page])
  return (
    <section aria-labelledby="portal-requests-title">
      <h1 id="portal-requests-title">Requests</h1>
      <p class="help">
        The requests made with this account's keys, newest first: never a header, body or query string.
      </p>
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
        <Empty>No request recorded yet: requests are listed about a second after they are answered.</Empty>
      )}
      {rows.length > 0 && (
        <div class="table-wrap">
          <table class="cards" data-testid="portal-requests">
            <caption class="visually-hidden">Requests, newest first</caption>
            <thead>
              <tr>
                <th scope="col">Time</th>
                <th scope="col">Method</th>
                <th scope="col">Path</th>
                <th scope="col">Status</th>
                <th scope="col">Code</th>
                <th scope="col">Duration</th>
                <th scope="col">Key id</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((r) => (
                <tr key={r.id} data-request-id={r.id} data-status={r.status} data-tenant={r.tenant_id}>
                  <td data-label="Time">{formatTime(r.time)}</td>
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
                  <td data-label="Key id" class="mono">
                    {r.key_id}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {page !== null && <Pager pager={pager} nextCursor={page.next_cursor} label="Requests" />}
    </section>
  )
}
