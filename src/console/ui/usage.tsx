// Usage: the daily chart for the whole account (#/usage, with the account's quota) or for one
// sub-account (on its page, with its month so far against its limits), over a range the user
// picks, read as the screen opens; under it, who made the requests (usage-breakdown.tsx), and for
// the account, reconciliation (reconciliation.tsx).
import { useEffect, useState } from 'preact/hooks'
import { api } from './api.js'
import { announce, ErrorMessage, Loading, useAction } from './components.js'
import { UsageChart } from './chart.js'
import { perDuration } from './key-policy.js'
import type { AccountLimits, SubAccount, SubAccountListed } from './types.js'
import { Reconciliation } from './reconciliation.js'
import { ByKey, BySubAccount } from './usage-breakdown.js'
import { CLASSES, dailyUsage, firstOfMonth, type RangeUsage, reportEntries, today, totalOf } from './usage-data.js'

function RangeChart({
  subAccountId,
  title,
  onShow,
}: {
  subAccountId: string | null
  title: string
  /** Told on every "Show usage": what else the screen shows of usage is read again too. */
  onShow?: () => void
}) {
  const [from, setFrom] = useState(firstOfMonth())
  const [to, setTo] = useState(today())
  // A new object on every submit: showing the same range again reads it again.
  const [range, setRange] = useState({ from, to })
  const [usage, setUsage] = useState<RangeUsage | null>(null)
  const load = useAction()
  const idPart = subAccountId === null ? 'account' : 'sub'

  useEffect(() => {
    setUsage(null)
    load.run(async (current) => {
      const next = await dailyUsage(range.from, range.to, subAccountId)
      if (!current()) return
      setUsage(next)
      const all = CLASSES.reduce((n, c) => n + totalOf(next.series, c), 0)
      announce(
        `Usage from ${range.from} to ${range.to}: ${all} requests, ${totalOf(next.series, '429')} refused by limits`,
      )
    })
  }, [range, subAccountId])

  return (
    <div>
      <form
        class="filters"
        onSubmit={(e) => {
          e.preventDefault()
          setRange({ from, to })
          onShow?.()
        }}
      >
        <div class="field">
          <label for={`${idPart}-from`}>From (UTC date)</label>
          <input
            id={`${idPart}-from`}
            type="date"
            required
            value={from}
            onInput={(e) => setFrom(e.currentTarget.value)}
          />
        </div>
        <div class="field">
          <label for={`${idPart}-to`}>To (UTC date)</label>
          <input id={`${idPart}-to`} type="date" required value={to} onInput={(e) => setTo(e.currentTarget.value)} />
        </div>
        <button type="submit">Show usage</button>
      </form>
      <ErrorMessage error={load.error} />
      {usage === null && load.error === null && <Loading what="usage" />}
      {usage !== null && (
        <>
          <p class="totals" data-testid="usage-totals">
            {usage.series.dates.length} days: {CLASSES.map((c) => `${totalOf(usage.series, c)} ${c}`).join(', ')}
          </p>
          <UsageChart series={usage.series} label={title} subAccountId={subAccountId} />
          {subAccountId === null && <BySubAccount entries={usage.entries} />}
        </>
      )}
      {/* By key: its own call, for the range shown (not the one being typed). */}
      {subAccountId !== null && <ByKey subAccountId={subAccountId} range={range} />}
    </div>
  )
}

function QuotaUse({ limits }: { limits: AccountLimits }) {
  const quota = limits.account.monthly_quota?.requests ?? null
  return (
    <div class="quota" data-testid="account-quota">
      <p>
        This month ({limits.month}): <strong>{limits.used}</strong> request units
        {quota === null ? ', no monthly quota.' : ` of a quota of ${quota}.`}
      </p>
      {quota !== null && (
        <>
          <label for="quota-meter">Quota used</label> <meter id="quota-meter" min={0} max={quota} value={limits.used} />{' '}
          {Math.round((limits.used / quota) * 100)}%
        </>
      )}
      <p data-testid="account-rate">
        {limits.account.rate === null
          ? 'No account rate limit.'
          : `Account rate: ${limits.account.rate.requests} ${perDuration(limits.account.rate.per_seconds)}.`}
      </p>
    </div>
  )
}

export function UsageScreen() {
  const [limits, setLimits] = useState<AccountLimits | null>(null)
  const load = useAction()
  useEffect(() => {
    load.run(async (current) => {
      const read = await api<AccountLimits>('GET', '/limits')
      if (current()) setLimits(read)
    })
  }, [])
  return (
    <section aria-labelledby="usage-title">
      <h1 id="usage-title">Usage</h1>
      <p class="help">Requests of all sub-accounts by day and status class (the parent's own traffic is not in it).</p>
      <ErrorMessage error={load.error} />
      {limits === null && load.error === null && <Loading what="the account's quota" />}
      {limits !== null && <QuotaUse limits={limits} />}
      <RangeChart subAccountId={null} title="All sub-accounts" />
      <Reconciliation />
    </section>
  )
}

export function UsagePanel({ subAccount }: { subAccount: SubAccount }) {
  const [month, setMonth] = useState<{ requests: number; limited: number; forwarded: number } | null>(null)
  const [shown, setShown] = useState(0)
  const load = useAction()
  useEffect(() => {
    load.run(async (current) => {
      // The report's month (every request, the limits' 429s) and what the quota counts (forwarded
      // requests, the API's usage_this_month): two reads, the quota's share exact.
      const [[entry], figures] = await Promise.all([
        reportEntries(firstOfMonth(), today(), subAccount.id),
        api<SubAccountListed>('GET', `/${encodeURIComponent(subAccount.id)}?include=usage_this_month`),
      ])
      if (!current()) return
      setMonth({
        requests: entry?.requests ?? 0,
        limited: (entry?.limited.rate ?? 0) + (entry?.limited.quota ?? 0),
        forwarded: figures.usage_this_month ?? 0,
      })
    })
  }, [subAccount.id, shown])
  const quota = subAccount.limits.monthly_quota?.requests ?? null
  const rate = subAccount.limits.rate
  return (
    <section class="card" aria-labelledby="sub-usage-title">
      <h2 id="sub-usage-title">Usage</h2>
      <ErrorMessage error={load.error} />
      {month !== null && (
        <p data-testid="sub-month">
          This month: {month.requests} requests, {month.limited} refused by limits
          {quota === null ? '; no monthly quota.' : `; monthly quota ${quota}.`}
        </p>
      )}
      {month !== null && (
        <div class="quota" data-testid="sub-use">
          {quota !== null && (
            <p data-testid="sub-quota">
              <label for="sub-quota-meter">Monthly quota used</label>{' '}
              <meter id="sub-quota-meter" min={0} max={quota} high={quota * 0.8} value={month.forwarded} />{' '}
              {month.forwarded} of {quota} request units ({Math.round((month.forwarded / quota) * 100)}%)
            </p>
          )}
          <p data-testid="sub-rate">
            {rate === null ? 'No rate limit.' : `Rate limit: ${rate.requests} ${perDuration(rate.per_seconds)}.`}
          </p>
        </div>
      )}
      <RangeChart
        subAccountId={subAccount.id}
        title={`${subAccount.name} by day`}
        onShow={() => setShown((n) => n + 1)}
      />
    </section>
  )
}
