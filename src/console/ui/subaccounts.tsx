// Sub-accounts: a page at a time in the order the user picks by a column's header (the API's
// `sort`, so the order holds across pages), each with its active keys and this month's use (the
// API's `include`), a search by the start of any word of a name or of an external id (the API's `q`, sent as the
// user types, once typing pauses), a status filter, and the create form.
import { useEffect, useRef, useState } from 'preact/hooks'
import { api, type Page, query } from './api.js'
import { announce, Empty, ErrorMessage, formatTime, Loading, Pager, usePager, useAction } from './components.js'
import { perDuration } from './key-policy.js'
import { useLimitPreview } from './limit-preview.js'
import { describeMeterLimits, LimitsFields, limitsFromForm } from './limits.js'
import { PlanSelect, usePlans } from './plan-select.js'
import type { Limits, SubAccount, SubAccountListed } from './types.js'

const PAGE = 20
/** How long typing must pause before the search is sent: one call for a word, not one a key. */
const SEARCH_DELAY_MS = 300
/** The API's bound on `q` (docs/api.md, Sub-accounts). */
const SEARCH_MAX_LENGTH = 200

/** The API's orders (docs/api.md, Sub-accounts: `sort`); `-` is descending. */
type Sort = 'created_at' | '-created_at' | 'name' | '-name'
type SortColumn = 'name' | 'created_at'

/** A header pressed: its column ascending, or descending when it was already ascending. */
const nextSort = (current: Sort, column: SortColumn): Sort => (current === column ? `-${column}` : column)

const ariaSort = (current: Sort, column: SortColumn): 'ascending' | 'descending' | undefined =>
  current === column ? 'ascending' : current === `-${column}` ? 'descending' : undefined

const SORT_WORDS: Record<Sort, string> = {
  created_at: 'oldest first',
  '-created_at': 'newest first',
  name: 'by name, A to Z',
  '-name': 'by name, Z to A',
}

export function SubAccountsScreen() {
  const [status, setStatus] = useState('')
  const [text, setText] = useState('')
  const [searched, setSearched] = useState('')
  const [page, setPage] = useState<Page<SubAccountListed> | null>(null)
  const [reload, setReload] = useState(0)
  const [creating, setCreating] = useState(false)
  const [trying, setTrying] = useState(false)
  const [sort, setSort] = useState<Sort>('created_at')
  const newButton = useRef<HTMLButtonElement>(null)
  const pager = usePager()
  const load = useAction()

  const searchFor = (typed: string) => {
    const next = typed.trim()
    if (next === searched) return
    pager.reset()
    setSearched(next)
  }
  useEffect(() => {
    const timer = setTimeout(() => searchFor(text), SEARCH_DELAY_MS)
    return () => clearTimeout(timer)
  }, [text])

  useEffect(() => {
    setPage(null)
    load.run(async (current) => {
      const next = await api<Page<SubAccountListed>>(
        'GET',
        query({
          limit: PAGE,
          cursor: pager.cursor,
          status,
          q: searched,
          // The default order is left out of the address: the same call as before there were sorts.
          sort: sort === 'created_at' ? null : sort,
          include: 'key_count,usage_this_month',
        }),
      )
      if (!current()) return
      setPage(next)
      announce(
        `${next.data.length} sub-account${next.data.length === 1 ? '' : 's'} ${searched === '' ? 'shown' : `match “${searched}”`}, ${SORT_WORDS[sort]}`,
      )
    })
  }, [status, searched, sort, pager.cursor, reload])

  /** A cursor pages one order only (the API refuses it under another): a new order starts at page 1. */
  const sortBy = (column: SortColumn) => {
    pager.reset()
    setSort(nextSort(sort, column))
  }
  const header = (column: SortColumn, label: string) => (
    <th scope="col" aria-sort={ariaSort(sort, column)}>
      <button type="button" class="sort" onClick={() => sortBy(column)} data-testid={`sort-${column}`}>
        {label}
        <span aria-hidden="true" class="sort-mark">
          {sort === column ? ' ▲' : sort === `-${column}` ? ' ▼' : ''}
        </span>
      </button>
    </th>
  )

  return (
    <section aria-labelledby="subaccounts-title">
      <div class="heading-row">
        <h1 id="subaccounts-title">Sub-accounts</h1>
        <div class="actions">
          <button type="button" ref={newButton} onClick={() => setCreating(!creating)} aria-expanded={creating}>
            New sub-account
          </button>
          <button type="button" class="secondary" onClick={() => setTrying(!trying)} aria-expanded={trying}>
            Try a limit on every sub-account
          </button>
        </div>
      </div>
      {trying && <TryLimitForm nameOf={(id) => page?.data.find((s) => s.id === id)?.name ?? id} />}
      {creating && (
        <CreateForm
          onCreated={(s) => {
            setCreating(false)
            location.hash = `#/sub-accounts/${s.id}`
          }}
          onCancel={() => {
            setCreating(false)
            newButton.current?.focus() // focus back where the form was opened
          }}
        />
      )}
      <form
        class="filters"
        onSubmit={(e) => {
          e.preventDefault()
          searchFor(text)
        }}
      >
        <div class="field">
          <label for="search">Name or external id</label>
          <input
            id="search"
            type="search"
            maxLength={SEARCH_MAX_LENGTH}
            aria-describedby="search-help"
            value={text}
            onInput={(e) => setText(e.currentTarget.value)}
          />
          <span id="search-help" class="help">
            The start of any word of a name, or of an external id, any case
          </span>
        </div>
        <div class="field">
          <label for="status-filter">Status</label>
          <select
            id="status-filter"
            value={status}
            onChange={(e) => {
              pager.reset()
              setStatus(e.currentTarget.value)
            }}
          >
            <option value="">Any</option>
            <option value="active">Active</option>
            <option value="deactivated">Deactivated</option>
          </select>
        </div>
        <div class="field">
          {/* The headers' order as a field too: under 600 px the table is cards, without headers. */}
          <label for="sort">Order</label>
          <select
            id="sort"
            value={sort}
            onChange={(e) => {
              pager.reset()
              setSort(e.currentTarget.value as Sort)
            }}
          >
            {(Object.keys(SORT_WORDS) as Sort[]).map((name) => (
              <option key={name} value={name}>
                {SORT_WORDS[name][0]!.toUpperCase() + SORT_WORDS[name].slice(1)}
              </option>
            ))}
          </select>
        </div>
        <button type="submit">Search</button>
      </form>
      <ErrorMessage error={load.error} />
      {page === null && load.error === null && <Loading what="sub-accounts" />}
      {page !== null && page.data.length === 0 && (
        <Empty>{searched === '' ? 'No sub-accounts yet: create the first one.' : 'No sub-account matches.'}</Empty>
      )}
      {page !== null && page.data.length > 0 && (
        <div class="table-wrap">
          <table class="cards" data-testid="subaccounts">
            <caption class="visually-hidden">Sub-accounts, {SORT_WORDS[sort]}</caption>
            <thead>
              <tr>
                {header('name', 'Name')}
                <th scope="col">External id</th>
                <th scope="col">Status</th>
                <th scope="col">Keys</th>
                <th scope="col">This month</th>
                <th scope="col">Limits</th>
                {/* "Added", not "Created": no button here may be named like the form's Create. */}
                {header('created_at', 'Added')}
              </tr>
            </thead>
            <tbody>
              {page.data.map((s) => (
                <tr key={s.id}>
                  <td data-label="Name">
                    <a href={`#/sub-accounts/${s.id}`}>{s.name}</a>
                  </td>
                  <td data-label="External id" class="mono">
                    {s.external_id ?? '—'}
                  </td>
                  <td data-label="Status">
                    <span class={`badge ${s.status}`}>{s.status}</span>
                  </td>
                  <td data-label="Keys" class="number">
                    {s.key_count ?? '—'}
                  </td>
                  <td data-label="This month" class="number">
                    {monthUse(s)}
                  </td>
                  <td data-label="Limits">{describeLimits(s)}</td>
                  <td data-label="Added">{formatTime(s.created_at)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {page !== null && <Pager pager={pager} nextCursor={page.next_cursor} label="Sub-accounts" />}
      {searched !== '' && (
        <button
          type="button"
          class="link"
          onClick={() => {
            setText('')
            setSearched('')
            pager.reset()
            setReload(reload + 1)
          }}
        >
          Clear the search
        </button>
      )}
    </section>
  )
}

/** This month's request units (forwarded requests at their cost), and the share of its monthly quota when it has one. */
function monthUse(s: SubAccountListed): string {
  if (s.usage_this_month === undefined) return '—'
  const quota = s.limits.monthly_quota?.requests
  const used = s.usage_this_month.toLocaleString('en')
  return quota === undefined ? used : `${used} (${Math.round((s.usage_this_month / quota) * 100)}% of quota)`
}

export function describeLimits(s: { limits: Limits }): string {
  const parts: string[] = []
  if (s.limits.rate !== null) parts.push(`${s.limits.rate.requests} ${perDuration(s.limits.rate.per_seconds)}`)
  if (s.limits.monthly_quota !== null) parts.push(`${s.limits.monthly_quota.requests} a month`)
  if (s.limits.meters !== undefined) parts.push(describeMeterLimits(s.limits))
  return parts.length === 0 ? 'none' : parts.join(', ')
}

/**
 * Limits tried on every sub-account, each as its own: whom they would have refused over the last
 * 7 days (the account-level view of a Preview; nothing is saved).
 */
function TryLimitForm({ nameOf }: { nameOf: (id: string) => string }) {
  const preview = useLimitPreview(null, null, nameOf)
  return (
    <form class="card" onSubmit={(e) => e.preventDefault()} aria-labelledby="try-title">
      <h2 id="try-title">Try a limit on every sub-account</h2>
      <p class="hint">Each sub-account under these limits as its own, over the last 7 days. Nothing is saved.</p>
      <LimitsFields prefix="try" limits={null} />
      <div class="actions">{preview.button}</div>
      {preview.result}
    </form>
  )
}

function CreateForm({ onCreated, onCancel }: { onCreated: (s: SubAccount) => void; onCancel: () => void }) {
  const action = useAction()
  // Offered when the account has plans; a failed read leaves the form as it was without them.
  const { plans } = usePlans()
  const submit = (e: Event) => {
    e.preventDefault()
    const form = new FormData(e.currentTarget as HTMLFormElement)
    const externalId = String(form.get('external_id') ?? '').trim()
    action.run(async () => {
      const created = await api<SubAccount>('POST', '', {
        name: String(form.get('name') ?? ''),
        external_id: externalId === '' ? null : externalId,
        limits: limitsFromForm(form),
        ...(form.get('plan_id') ? { plan_id: String(form.get('plan_id')) } : {}),
      })
      onCreated(created)
    }, 'Sub-account created')
  }
  return (
    <form class="card" onSubmit={submit} aria-labelledby="create-title">
      <h2 id="create-title">New sub-account</h2>
      <div class="field">
        <label for="new-name">Name</label>
        <input id="new-name" name="name" required maxLength={200} />
      </div>
      <div class="field">
        <label for="new-external-id">External id (optional)</label>
        <input id="new-external-id" name="external_id" maxLength={128} class="mono" />
      </div>
      {plans !== null && plans.length > 0 && <PlanSelect id="new-plan" plans={plans} chosen={null} />}
      <LimitsFields prefix="new" limits={null} />
      <ErrorMessage error={action.error} />
      <div class="actions">
        <button type="submit" disabled={action.busy}>
          Create
        </button>
        <button type="button" class="secondary" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </form>
  )
}
