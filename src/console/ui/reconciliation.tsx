// Reconciliation on the Usage screen: per sub-account and meter of a range, the usage meter beside
// what limits charged, the request log's count and the export, each difference explained; those
// with an unexplained difference first, and counted in the summary (docs/billing.md).
import { useState } from 'preact/hooks'
import { api, query } from './api.js'
import { announce, ErrorMessage, Loading, useAction } from './components.js'
import { CardTable } from './list-table.js'
import type { ReconciliationEntry } from './types.js'
import { firstOfMonth, reportEntries, today } from './usage-data.js'

type Entry = ReconciliationEntry
type Difference = Entry['differences'][number]

/** What each kind means, after "N units" (docs/billing.md, Reconciliation). */
const KINDS: Record<string, string> = {
  late: 'served in one period, billed in another',
  log_dropped: 'whose request log records were dropped',
  open_period: 'in periods still open',
  log_expired: 'older than the request log holds',
  not_exported: 'closed, not yet acknowledged by the receiver',
  not_limited: 'served while no limit applied',
  replica_lost: 'lost with a replica killed between its flushes',
  unexplained: 'unexplained: report it',
}

const AGAINST: Record<Difference['against'], string> = { limiter: 'Limiter', log: 'Request log', export: 'Export' }

/** The day after a YYYY-MM-DD date, at midnight UTC: `to` of a range whose last day is `date`. */
function dayAfter(date: string): string {
  const next = new Date(`${date}T00:00:00Z`)
  next.setUTCDate(next.getUTCDate() + 1)
  return `${next.toISOString().slice(0, 10)}T00:00:00Z`
}

const unexplained = (entry: Entry) => entry.differences.some((d) => d.kind === 'unexplained')
const count = (value: number | null) => (value === null ? '—' : value.toLocaleString('en'))

function Differences({ differences }: { differences: readonly Difference[] }) {
  if (differences.length === 0) return <>None</>
  return (
    <ul class="plain">
      {differences.map((d) => (
        <li key={`${d.against} ${d.kind}`} class={d.kind === 'unexplained' ? 'bad' : undefined}>
          {AGAINST[d.against]}: {d.units.toLocaleString('en')} {Math.abs(d.units) === 1 ? 'unit' : 'units'}{' '}
          {KINDS[d.kind] ?? d.kind}
        </li>
      ))}
    </ul>
  )
}

export function Reconciliation() {
  const [from, setFrom] = useState(firstOfMonth())
  const [to, setTo] = useState(today())
  const [entries, setEntries] = useState<Entry[] | null>(null)
  const [names, setNames] = useState<ReadonlyMap<string, string>>(new Map())
  const load = useAction()
  const run = () =>
    load.run(async (current) => {
      setEntries(null)
      // The sub-accounts' names from the usage report of the same days (those with use are in both).
      const [answer, report] = await Promise.all([
        api<{ data: Entry[] }>('GET', `/usage/reconciliation${query({ from: `${from}T00:00:00Z`, to: dayAfter(to) })}`),
        reportEntries(from, to, null, 'range', true),
      ])
      if (!current()) return
      setNames(
        new Map(report.map((entry) => [entry.sub_account_id, entry.name ?? entry.external_id ?? entry.sub_account_id])),
      )
      const sorted = [...answer.data].sort((a, b) => Number(unexplained(b)) - Number(unexplained(a)))
      setEntries(sorted)
      announce(`Reconciliation: ${summary(sorted)}`)
    })
  return (
    <section aria-labelledby="reconciliation-title">
      <h2 id="reconciliation-title">Reconciliation</h2>
      <p class="help">
        What the usage meter bills, beside what limits charged, what the request log recorded and what was exported.
        Every difference says what explains it.
      </p>
      <form
        class="filters"
        onSubmit={(e) => {
          e.preventDefault()
          run()
        }}
      >
        <div class="field">
          <label for="reconcile-from">First day (UTC)</label>
          <input
            id="reconcile-from"
            type="date"
            required
            value={from}
            onInput={(e) => setFrom(e.currentTarget.value)}
          />
        </div>
        <div class="field">
          <label for="reconcile-to">Last day (UTC)</label>
          <input id="reconcile-to" type="date" required value={to} onInput={(e) => setTo(e.currentTarget.value)} />
        </div>
        <button type="submit">Reconcile</button>
      </form>
      <ErrorMessage error={load.error} />
      {load.busy && <Loading what="the reconciliation" />}
      {entries !== null && <ReconciliationTable entries={entries} names={names} />}
    </section>
  )
}

function summary(entries: readonly Entry[]): string {
  const flagged = entries.filter(unexplained).length
  return `${entries.length} ${entries.length === 1 ? 'entry' : 'entries'}, ${
    flagged === 0 ? 'every difference explained' : `${flagged} with an unexplained difference`
  }`
}

function ReconciliationTable({ entries, names }: { entries: readonly Entry[]; names: ReadonlyMap<string, string> }) {
  if (entries.length === 0) return <p class="help">No use in this range.</p>
  return (
    <>
      <p class="totals" data-testid="reconciliation-summary">
        {summary(entries)}
      </p>
      <CardTable
        testId="reconciliation"
        caption="Reconciliation by sub-account and meter"
        columns={['Sub-account', 'Meter', 'Billed', 'Limiter', 'Request log', 'Exported', 'Differences']}
      >
        {entries.map((entry) => (
          <tr key={`${entry.sub_account_id} ${entry.meter}`}>
            <td data-label="Sub-account">
              {entry.sub_account_id === null ? (
                'The parent itself'
              ) : (
                <a href={`#/sub-accounts/${entry.sub_account_id}`}>
                  {names.get(entry.sub_account_id) ?? entry.sub_account_id}
                </a>
              )}
            </td>
            <td data-label="Meter">{entry.meter}</td>
            <td data-label="Billed">{count(entry.meter_units)}</td>
            <td data-label="Limiter">{count(entry.limiter_units)}</td>
            <td data-label="Request log">{count(entry.log_units)}</td>
            <td data-label="Exported">{count(entry.exported_units)}</td>
            <td data-label="Differences">
              <Differences differences={entry.differences} />
            </td>
          </tr>
        ))}
      </CardTable>
    </>
  )
}
