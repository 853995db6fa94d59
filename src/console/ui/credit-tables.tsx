// A sub-account's credit balances and grants as tables, in the console (with the credit limits in
// force and a Void on each live grant) and in the portal (read-only, without the parent's metadata).
import { formatTime } from './components.js'
import { CardTable } from './list-table.js'
import type { CreditGrant, Credits, Limits } from './types.js'

/** A grant as the portal shows it: the parent's metadata stays out. */
type ShownGrant = Omit<CreditGrant, 'metadata'> & { metadata?: CreditGrant['metadata'] }

export function grantState(grant: ShownGrant, nowMs = Date.now()): 'live' | 'voided' | 'expired' {
  if (grant.voided_at !== null) return 'voided'
  return grant.expires_at !== null && Date.parse(grant.expires_at) <= nowMs ? 'expired' : 'live'
}

function stateText(grant: ShownGrant): string {
  const state = grantState(grant)
  if (state === 'voided') return `Voided ${formatTime(grant.voided_at)}`
  if (state === 'expired') return `Expired ${formatTime(grant.expires_at)}`
  return 'Live'
}

function limitText(limits: Limits | undefined, meter: string): string {
  const credit = limits?.credits?.[meter]
  if (credit === undefined) return 'Not required: use goes on at zero'
  return `Required: refused at zero (402); low below ${credit.low_threshold_percent}% of the live grants`
}

export function BalancesTable({ balances, limits }: { balances: Credits['balances']; limits?: Limits }) {
  return (
    <CardTable
      testId="credit-balances"
      caption="Balances by meter"
      columns={['Meter', 'Balance', limits !== undefined && 'Credit limit']}
    >
      {balances.map((b) => (
        <tr key={b.meter}>
          <td data-label="Meter" class="mono">
            {b.meter}
          </td>
          <td data-label="Balance" data-testid={`balance ${b.meter}`}>
            {b.units_left} {b.meter} left
            {b.units_left < 0 && ` (${-b.units_left} owed: the next grant pays them first)`}
          </td>
          {limits !== undefined && <td data-label="Credit limit">{limitText(limits, b.meter)}</td>}
        </tr>
      ))}
    </CardTable>
  )
}

export function GrantsTable({
  grants,
  onVoid,
  busy = false,
}: {
  grants: readonly ShownGrant[]
  /** The console's Void; none in the portal. */
  onVoid?: (grant: ShownGrant) => void
  busy?: boolean
}) {
  const withMetadata = grants.some((g) => g.metadata !== undefined)
  return (
    <CardTable
      testId="credit-grants"
      caption="Grants, those use burns next first"
      columns={[
        'Meter',
        'Granted',
        'Left',
        'Priority',
        'Expires',
        'Made',
        'State',
        withMetadata && 'Metadata',
        onVoid !== undefined && 'Actions',
      ]}
    >
      {grants.map((g) => (
        <tr key={g.id} data-state={grantState(g)}>
          <td data-label="Meter" class="mono">
            {g.meter}
          </td>
          <td data-label="Granted">{g.units}</td>
          <td data-label="Left">{g.units_left}</td>
          <td data-label="Priority">{g.priority}</td>
          <td data-label="Expires">{g.expires_at === null ? 'no expiry' : formatTime(g.expires_at)}</td>
          <td data-label="Made">{formatTime(g.created_at)}</td>
          <td data-label="State">{stateText(g)}</td>
          {withMetadata && (
            <td data-label="Metadata">
              {Object.entries(g.metadata ?? {})
                .map(([key, value]) => `${key}: ${value}`)
                .join(', ') || '—'}
            </td>
          )}
          {onVoid !== undefined && (
            <td data-label="Actions">
              {grantState(g) === 'live' && (
                <button type="button" class="danger small" disabled={busy} onClick={() => onVoid(g)}>
                  Void
                  <span class="visually-hidden">
                    {' '}
                    the grant of {g.units} {g.meter} ({g.id.slice(0, 8)}…)
                  </span>
                </button>
              )}
            </td>
          )}
        </tr>
      ))}
    </CardTable>
  )
}
