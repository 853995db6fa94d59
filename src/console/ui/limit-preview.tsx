// The Preview of limits before they are saved (docs/api.md, The limit simulator): the limits a form
// holds, replayed over the last 7 days of the request log; who they would have refused, how often
// and when, as a small chart and a table. The same for a shadow limit: what it would have refused,
// enforced alone, beside what the enforced limits refused.
import type { ComponentChildren } from 'preact'
import { useEffect, useState } from 'preact/hooks'
import { api, problemOfError } from './api.js'
import { ErrorMessage, formatTime, Loading, useAction } from './components.js'
import { limitsFromForm } from './limits.js'
import type { Limits, Simulation } from './types.js'
import { reportEntries } from './usage-data.js'

/** How far back a Preview replays. */
export const PREVIEW_DAYS = 7
/** Rows of the table, and bars of the chart, at most: the most refused. */
const SHOWN = 20
const CHART_BARS = 10

/**
 * Replays `limits` over the last 7 days: for one sub-account, or for every sub-account as its own
 * (null). The simulator takes no shadow limits: it replays them as enforced ones.
 */
export async function simulate(limits: Limits, subAccountId: string | null): Promise<Simulation> {
  const { shadow: _, ...enforced } = limits
  // Up to now, and a little after (the gateway takes up to a minute ahead): a browser's clock a
  // little behind the gateway's still reaches its newest records.
  const to = new Date(Date.now() + 30_000)
  const ask = (from: string) =>
    api<Simulation>('POST', '/limits/simulations', {
      limits: enforced,
      ...(subAccountId === null ? {} : { sub_account_id: subAccountId }),
      from,
      to: to.toISOString(),
    })
  try {
    return await ask(new Date(to.getTime() - PREVIEW_DAYS * 86_400_000).toISOString())
  } catch (err) {
    // A log kept fewer days than the Preview's: the refusal says from when it holds them.
    const kept = problemOfError(err)
      .errors?.find((e) => e.path === '/body/from')
      ?.message.match(/\(\d+ days?: from (\S+)\)/)?.[1]
    if (kept === undefined) throw err
    return ask(kept)
  }
}

/**
 * A Preview button for a limits form, and what it found: the form's limits (as a save would send
 * them) replayed for `subAccountId`, or for every sub-account. `nameOf` names a sub-account.
 */
export function useLimitPreview(
  subAccountId: string | null,
  current: Limits | null,
  nameOf: (id: string) => string,
): { button: ComponentChildren; result: ComponentChildren } {
  const action = useAction()
  const [simulation, setSimulation] = useState<Simulation | null>(null)
  const preview = (e: Event) => {
    const form = (e.currentTarget as HTMLButtonElement).form
    if (form === null) return
    const limits = limitsFromForm(new FormData(form), current)
    action.run(async (isCurrent) => {
      const found = await simulate(limits, subAccountId)
      if (isCurrent()) setSimulation(found)
    }, 'Preview ready')
  }
  return {
    button: (
      <button type="button" class="secondary" onClick={preview} disabled={action.busy}>
        Preview
      </button>
    ),
    result: (
      <>
        <ErrorMessage error={action.error} />
        {simulation !== null && action.error === null && (
          <SimulationResult simulation={simulation} nameOf={nameOf} what="These limits" />
        )}
      </>
    ),
  }
}

/** In words: `would have refused 12 of 300 requests (4 %), of 2 sub-accounts`. */
export function refusedInWords(simulation: Simulation): string {
  const { requests, would_refuse: refused } = simulation.totals
  if (requests === 0) return `saw no request in the last ${PREVIEW_DAYS} days`
  if (refused === 0) return `would have refused none of ${requests.toLocaleString('en')} requests`
  const whom = simulation.data.filter((entry) => entry.would_refuse > 0).length
  const share = (100 * refused) / requests
  return `would have refused ${refused.toLocaleString('en')} of ${requests.toLocaleString('en')} requests (${share < 1 ? share.toFixed(1) : Math.round(share)} %), of ${whom} sub-account${whom === 1 ? '' : 's'}`
}

/** Who would have been refused: a chart of the most refused, and a table. */
export function SimulationResult({
  simulation,
  nameOf,
  what,
}: {
  simulation: Simulation
  nameOf: (id: string) => string
  what: string
}) {
  const refused = simulation.data.filter((entry) => entry.would_refuse > 0)
  const summary = `${what}, over the last ${PREVIEW_DAYS} days, ${refusedInWords(simulation)}.`
  return (
    <section class="preview" aria-label="Preview" data-testid="preview">
      <p data-testid="preview-summary">{summary}</p>
      {refused.length > 0 && <RefusalChart entries={refused.slice(0, CHART_BARS)} nameOf={nameOf} />}
      {refused.length > 0 && (
        <div class="table-wrap">
          <table class="cards" data-testid="preview-table">
            <caption class="visually-hidden">Who would have been refused, most first</caption>
            <thead>
              <tr>
                <th scope="col">Sub-account</th>
                <th scope="col">Requests</th>
                <th scope="col">Would refuse</th>
                <th scope="col">First refusal</th>
                <th scope="col">Busiest second</th>
              </tr>
            </thead>
            <tbody>
              {refused.slice(0, SHOWN).map((entry) => (
                <tr key={entry.sub_account_id}>
                  <td data-label="Sub-account">
                    <a href={`#/sub-accounts/${entry.sub_account_id}`}>{nameOf(entry.sub_account_id)}</a>
                  </td>
                  <td data-label="Requests">{entry.requests.toLocaleString('en')}</td>
                  <td data-label="Would refuse">{entry.would_refuse.toLocaleString('en')}</td>
                  <td data-label="First refusal">{formatTime(entry.first_refusal_at)}</td>
                  <td data-label="Busiest second">
                    {entry.peak_second.requests.toLocaleString('en')} at {formatTime(entry.peak_second.at)}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          {refused.length > SHOWN && (
            <p class="hint">And {(refused.length - SHOWN).toLocaleString('en')} more sub-accounts.</p>
          )}
        </div>
      )}
    </section>
  )
}

/** Bars of each one's requests, the part that would be refused filled: how often, at a glance. */
function RefusalChart({ entries, nameOf }: { entries: Simulation['data']; nameOf: (id: string) => string }) {
  const most = Math.max(...entries.map((entry) => entry.requests))
  const rowHeight = 22
  const label = entries
    .map((entry) => `${nameOf(entry.sub_account_id)}: ${entry.would_refuse} of ${entry.requests} refused`)
    .join('; ')
  return (
    <svg
      class="refusal-chart"
      role="img"
      aria-label={`Would be refused, by sub-account: ${label}`}
      viewBox={`0 0 400 ${entries.length * rowHeight}`}
      width="100%"
      height={entries.length * rowHeight}
      preserveAspectRatio="none"
      data-testid="preview-chart"
    >
      {entries.map((entry, i) => {
        const width = (360 * entry.requests) / most
        return (
          <g key={entry.sub_account_id}>
            <rect class="requests" x={40} y={i * rowHeight + 4} width={width} height={rowHeight - 8} />
            <rect
              class="refused"
              x={40 + width - (width * entry.would_refuse) / entry.requests}
              y={i * rowHeight + 4}
              width={(width * entry.would_refuse) / entry.requests}
              height={rowHeight - 8}
            />
            <text x={0} y={i * rowHeight + rowHeight / 2 + 4} class="chart-label">
              {i + 1}
            </text>
          </g>
        )
      })}
    </svg>
  )
}

/**
 * A sub-account's shadow limits over the last 7 days: what they would have refused, replayed as if
 * enforced alone (what enforcing them would do), beside the 429s its enforced limits gave.
 */
export function ShadowLimitsSection({ subAccountId, shadow }: { subAccountId: string; shadow: Limits }) {
  const load = useAction()
  const [seen, setSeen] = useState<{ simulation: Simulation; rate: number; quota: number } | null>(null)
  const key = JSON.stringify(shadow)
  useEffect(() => {
    load.run(async (isCurrent) => {
      const today = new Date()
      const day = (at: Date) => at.toISOString().slice(0, 10)
      const [simulation, entries] = await Promise.all([
        simulate(shadow, subAccountId),
        reportEntries(day(new Date(today.getTime() - PREVIEW_DAYS * 86_400_000)), day(today), subAccountId),
      ])
      const limited = entries[0]?.limited ?? { rate: 0, quota: 0 }
      if (isCurrent()) setSeen({ simulation, rate: limited.rate, quota: limited.quota })
    })
  }, [subAccountId, key])
  return (
    <section class="card" aria-labelledby="shadow-title" data-testid="shadow-section">
      <h2 id="shadow-title">Shadow limits, the last {PREVIEW_DAYS} days</h2>
      <ErrorMessage error={load.error} />
      {seen === null && load.error === null && <Loading what="what the shadow limits would have refused" />}
      {seen !== null && (
        <dl class="facts">
          <dt>Would have refused (the shadow limits, enforced alone)</dt>
          <dd data-testid="shadow-would-refuse">
            {seen.simulation.totals.would_refuse.toLocaleString('en')} of{' '}
            {seen.simulation.totals.requests.toLocaleString('en')} requests
            {seen.simulation.data[0]?.first_refusal_at
              ? `, the first at ${formatTime(seen.simulation.data[0].first_refusal_at)}`
              : ''}
          </dd>
          <dt>Refused (the enforced limits)</dt>
          <dd data-testid="shadow-real-refusals">
            {(seen.rate + seen.quota).toLocaleString('en')}: {seen.rate.toLocaleString('en')} by the rate,{' '}
            {seen.quota.toLocaleString('en')} by the monthly quota
          </dd>
        </dl>
      )}
    </section>
  )
}
