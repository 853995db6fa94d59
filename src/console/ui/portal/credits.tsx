// The portal's Credits screen (#/credits, with usage:read; docs/portal.md): the customer's balance
// of each meter and its grants, read-only, from GET /portal/api/credits (its own sub-account only,
// without the parent's metadata).
import { useEffect, useState } from 'preact/hooks'
import { announce, Empty, ErrorMessage, Loading, useAction } from '../components.js'
import { BalancesTable, GrantsTable } from '../credit-tables.js'
import type { CreditGrant, Credits } from '../types.js'
import { portalApi } from './api.js'

/** `GET /portal/api/credits`: the grants without their metadata. */
type PortalCredits = Omit<Credits, 'grants'> & { grants: Omit<CreditGrant, 'metadata'>[] }

export function CreditsScreen() {
  const [credits, setCredits] = useState<PortalCredits | null>(null)
  const load = useAction()
  useEffect(() => {
    load.run(async (current) => {
      const read = await portalApi<PortalCredits>('GET', '/credits')
      if (!current()) return
      setCredits(read)
      announce(
        read.balances.length === 0
          ? 'No prepaid credits'
          : `Balances: ${read.balances.map((b) => `${b.units_left} ${b.meter}`).join(', ')}`,
      )
    })
  }, [])
  return (
    <section aria-labelledby="portal-credits-title">
      <h1 id="portal-credits-title">Credits</h1>
      <p>
        Prepaid units: your use burns them, those of lower priority first, then those that expire soonest, then the
        oldest. What is left of a grant is gone when it expires.
      </p>
      <ErrorMessage error={load.error} />
      {credits === null && load.error === null && <Loading what="your credits" />}
      {credits !== null && credits.balances.length === 0 && <Empty>No prepaid credits.</Empty>}
      {credits !== null && credits.balances.length > 0 && (
        <>
          <h2>Balances</h2>
          <BalancesTable balances={credits.balances} />
          <h2>Grants</h2>
          {credits.grants.length === 0 ? <Empty>No grant yet.</Empty> : <GrantsTable grants={credits.grants} />}
        </>
      )}
    </section>
  )
}
