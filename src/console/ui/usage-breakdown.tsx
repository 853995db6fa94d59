// Who made the requests of a range: the whole account's by sub-account (from the report the chart
// already read, with include=name), a sub-account's by key (GET …/{id}/usage). Most requests first,
// each with its share of the range, so that the biggest user is the first line.
import { useEffect, useState } from 'preact/hooks'
import { ErrorMessage, Loading, useAction } from './components.js'
import { CardTable } from './list-table.js'
import type { KeyUsageEntry, UsageEntry } from './types.js'
import { unitsText } from './units.js'
import { keyUsage, type StatusClass, sharesOf } from './usage-data.js'

/** How many lines a breakdown shows; the rest are counted under it. */
const SHOWN = 20

const percent = (part: number, whole: number) => (whole === 0 ? 0 : Math.round((part / whole) * 100))

function ShareCell({ requests, total, label }: { requests: number; total: number; label: string }) {
  const share = percent(requests, total)
  return (
    <td data-label="Share" class="share">
      <meter min={0} max={100} value={share} aria-label={`${label}: share of the requests`} /> {share}%
    </td>
  )
}

/** An entry's units: request units, then each reported meter. */
function UnitsCell({ units }: { units: Readonly<Record<string, number>> }) {
  return (
    <td data-label="Units" class="units">
      {unitsText(units)}
    </td>
  )
}

function More({ hidden, what }: { hidden: number; what: string }) {
  if (hidden <= 0) return null
  return (
    <p class="help">
      And {hidden} more {what} with fewer requests.
    </p>
  )
}

/** The account's range by sub-account: name (a link), requests, errors, the limits' 429s, share. */
export function BySubAccount({ entries }: { entries: readonly UsageEntry[] }) {
  const shares = sharesOf(entries)
  const total = shares.reduce((n, s) => n + s.requests, 0)
  return (
    <section aria-labelledby="by-sub-title">
      <h2 id="by-sub-title">By sub-account</h2>
      {shares.length === 0 ? (
        <p class="help">No sub-account made requests in this range.</p>
      ) : (
        <>
          <CardTable
            testId="usage-by-sub-account"
            caption="Requests of the range by sub-account, most first"
            columns={['Sub-account', 'Requests', '4xx', 'Refused by limits', '5xx', 'Units', 'Share']}
          >
            {shares.slice(0, SHOWN).map(({ id, requests, counts, entry }) => {
              const name = entry.name ?? entry.external_id ?? id
              return (
                <tr key={id}>
                  <td data-label="Sub-account">
                    <a href={`#/sub-accounts/${id}`}>{name}</a>
                  </td>
                  <Counts requests={requests} counts={counts} />
                  <UnitsCell units={entry.units} />
                  <ShareCell requests={requests} total={total} label={name} />
                </tr>
              )
            })}
          </CardTable>
          <More hidden={shares.length - SHOWN} what="sub-accounts" />
        </>
      )}
    </section>
  )
}

function Counts({ requests, counts }: { requests: number; counts: Record<StatusClass, number> }) {
  return (
    <>
      <td data-label="Requests" class="number">
        {requests}
      </td>
      <td data-label="4xx" class="number">
        {counts['4xx']}
      </td>
      <td data-label="Refused by limits" class="number">
        {counts['429']}
      </td>
      <td data-label="5xx" class="number">
        {counts['5xx']}
      </td>
    </>
  )
}

/** A sub-account's range by key: its own keys and its parent's acting as it. */
export function ByKey({ subAccountId, range }: { subAccountId: string; range: { from: string; to: string } }) {
  const [keys, setKeys] = useState<KeyUsageEntry[] | null>(null)
  const load = useAction()
  useEffect(() => {
    setKeys(null)
    load.run(async (current) => {
      const next = await keyUsage(range.from, range.to, subAccountId)
      if (current()) setKeys(next)
    })
    // A new range object on every "Show usage": the same range shown again is read again.
  }, [subAccountId, range])
  const total = (keys ?? []).reduce((n, k) => n + k.requests, 0)
  return (
    <section aria-labelledby="by-key-title">
      <h3 id="by-key-title">By key</h3>
      <ErrorMessage error={load.error} />
      {keys === null && load.error === null && <Loading what="the usage by key" />}
      {keys !== null && keys.length === 0 && (
        <p class="help">No key made requests for this sub-account in this range.</p>
      )}
      {keys !== null && keys.length > 0 && (
        <>
          <CardTable
            testId="usage-by-key"
            caption="Requests of the range by key, most first"
            columns={['Key', 'Whose', 'Requests', '4xx', '5xx', 'Units', 'Share']}
          >
            {keys.slice(0, SHOWN).map((k) => {
              const label = `${k.name} (${k.prefix}…)`
              return (
                <tr key={k.key_id}>
                  <td data-label="Key">
                    {k.name} <span class="mono">{k.prefix}…</span>
                  </td>
                  <td data-label="Whose">{k.owner === 'parent' ? 'the parent, acting as it' : 'its own'}</td>
                  <td data-label="Requests" class="number">
                    {k.requests}
                  </td>
                  <td data-label="4xx" class="number">
                    {k.by_status['4xx']}
                  </td>
                  <td data-label="5xx" class="number">
                    {k.by_status['5xx']}
                  </td>
                  <UnitsCell units={k.units} />
                  <ShareCell requests={k.requests} total={total} label={label} />
                </tr>
              )
            })}
          </CardTable>
          <More hidden={keys.length - SHOWN} what="keys" />
          <p class="help">Counted by key since the gateway began keeping it (days before have no keys).</p>
        </>
      )}
    </section>
  )
}
