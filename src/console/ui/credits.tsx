// A sub-account's prepaid credits (#/sub-accounts/<id>/credits; docs/api.md, Credits): its balance
// of each meter with the credit limits in force, a burn-down chart a meter over the last 30 days
// (GET …/credits/history), its grants with Void, and a form that grants more.
import { useEffect, useState } from 'preact/hooks'
import { api, query } from './api.js'
import { Empty, ErrorMessage, Loading, useAction } from './components.js'
import { CreditChart } from './credit-chart.js'
import { CreditGrantForm } from './credit-grant-form.js'
import { BalancesTable, GrantsTable } from './credit-tables.js'
import type { CreditHistory, Credits, SubAccount } from './types.js'

/** How many days the charts show: today (UTC) and the days before it. */
const CHART_DAYS = 30
const DAY_MS = 86_400_000

/** The charts' range: the last CHART_DAYS UTC days, today included. */
export function chartRange(nowMs: number): { from: string; to: string } {
  const day = (ms: number) => new Date(ms).toISOString().slice(0, 10)
  return { from: day(nowMs - (CHART_DAYS - 1) * DAY_MS), to: day(nowMs) }
}

interface Read {
  sub: SubAccount
  credits: Credits
  history: CreditHistory
}

export function CreditsScreen({ id }: { id: string }) {
  const [read, setRead] = useState<Read | null>(null)
  // Bumped by a grant or a void: the balances, grants and charts are read again.
  const [changes, setChanges] = useState(0)
  const load = useAction()
  const change = useAction()
  useEffect(() => {
    load.run(async (current) => {
      const path = `/${encodeURIComponent(id)}`
      const [sub, credits, history] = await Promise.all([
        api<SubAccount>('GET', path),
        api<Credits>('GET', `${path}/credits`),
        api<CreditHistory>('GET', `${path}/credits/history${query(chartRange(Date.now()))}`),
      ])
      if (current()) setRead({ sub, credits, history })
    })
  }, [id, changes])

  const voidGrant = (grant: { id: string; units_left: number; meter: string }) =>
    change.runIfConfirmed(
      `Void this grant? Its ${grant.units_left} ${grant.meter} left are gone at once.`,
      async () => {
        await api('POST', `/${id}/credits/grants/${grant.id}/void`)
        setChanges((n) => n + 1)
      },
      'Grant voided',
    )

  const sub = read?.sub
  return (
    <section aria-labelledby="credits-title">
      <p>
        <a href={`#/sub-accounts/${encodeURIComponent(id)}`}>← {sub === undefined ? 'The sub-account' : sub.name}</a>
      </p>
      <h1 id="credits-title">Credits{sub === undefined ? '' : ` of ${sub.name}`}</h1>
      <p>
        Prepaid units of a route's meter: use burns the grants, and under a required credit limit a request is refused
        once the balance is spent. The count that burns them is the count that bills.
      </p>
      <ErrorMessage error={load.error} />
      {read === null && load.error === null && <Loading what="the credits" />}
      {read !== null && (
        <>
          <h2>Balances</h2>
          {read.credits.balances.length === 0 ? (
            <Empty>No grant and no credit limit yet.</Empty>
          ) : (
            <BalancesTable balances={read.credits.balances} limits={read.sub.effective_limits} />
          )}
          {read.history.meters.map((series) => (
            <CreditChart
              key={series.meter}
              series={series}
              label={`${series.meter} left in live grants, ${read.history.from} to ${read.history.to} (UTC)`}
            />
          ))}
          <h2>Grants</h2>
          <ErrorMessage error={change.error} />
          {read.credits.grants.length === 0 ? (
            <Empty>No grant yet.</Empty>
          ) : (
            <GrantsTable grants={read.credits.grants} onVoid={voidGrant} busy={change.busy} />
          )}
          <CreditGrantForm
            subId={read.sub.id}
            meters={read.credits.balances.map((b) => b.meter)}
            onGranted={() => setChanges((n) => n + 1)}
          />
        </>
      )}
    </section>
  )
}
