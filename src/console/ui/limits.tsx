// The limits fields (rate and monthly quota) of the create, edit and Preview forms; blank means no
// limit. Uncontrolled (default values): a Preview shown beside them must not reset what was typed.
// Limits in units (a route meter's) are shown, set through the API, and kept by a save.
import { perDuration } from './key-policy.js'
import type { Limits } from './types.js'

export function LimitsFields({ prefix, limits }: { prefix: string; limits: Limits | null }) {
  return (
    <fieldset class="limits">
      <legend>Limits (leave blank for none)</legend>
      <div class="field">
        <label for={`${prefix}-rate-requests`}>Rate: requests</label>
        <input
          id={`${prefix}-rate-requests`}
          name="rate_requests"
          type="number"
          min={1}
          inputMode="numeric"
          defaultValue={String(limits?.rate?.requests ?? '')}
        />
      </div>
      <div class="field">
        <label for={`${prefix}-rate-seconds`}>Rate: per seconds</label>
        <input
          id={`${prefix}-rate-seconds`}
          name="rate_per_seconds"
          type="number"
          min={1}
          max={3600}
          inputMode="numeric"
          defaultValue={String(limits?.rate?.per_seconds ?? '')}
        />
      </div>
      <div class="field">
        <label for={`${prefix}-quota`}>Monthly quota: requests</label>
        <input
          id={`${prefix}-quota`}
          name="monthly_quota"
          type="number"
          min={1}
          inputMode="numeric"
          defaultValue={String(limits?.monthly_quota?.requests ?? '')}
        />
      </div>
      {limits?.meters === undefined ? null : (
        <p class="hint" data-testid="meter-limits">
          In units (set through the API, kept when you save): {describeMeterLimits(limits)}
        </p>
      )}
      {limits?.shadow === undefined ? null : (
        <p class="hint" data-testid="shadow-limits">
          Shadow limits, counted and never refusing (set through the API, kept when you save):{' '}
          {describeShadow(limits.shadow)}
        </p>
      )}
    </fieldset>
  )
}

const numberOf = (form: FormData, name: string): number | null => {
  const raw = String(form.get(name) ?? '').trim()
  return raw === '' ? null : Number(raw)
}

/** `tokens: 50,000 per minute, 20,000,000 a month`: a tenant's limits in units, a meter after another. */
export function describeMeterLimits(limits: Pick<Limits, 'meters'>): string {
  return Object.entries(limits.meters ?? {})
    .map(([meter, { rate, monthly_quota: quota }]) => {
      const parts: string[] = []
      if (rate !== null) parts.push(`${rate.units.toLocaleString('en')} ${perDuration(rate.per_seconds)}`)
      if (quota !== null) parts.push(`${quota.units.toLocaleString('en')} a month`)
      return `${meter}: ${parts.join(', ')}`
    })
    .join('; ')
}

/** A tenant's shadow limits in words: `2 per hour, 1,000 a month, tokens: 50 per minute`. */
function describeShadow(shadow: NonNullable<Limits['shadow']>): string {
  const parts: string[] = []
  if (shadow.rate !== null)
    parts.push(`${shadow.rate.requests.toLocaleString('en')} ${perDuration(shadow.rate.per_seconds)}`)
  if (shadow.monthly_quota !== null) parts.push(`${shadow.monthly_quota.requests.toLocaleString('en')} a month`)
  if (shadow.meters !== undefined) parts.push(describeMeterLimits(shadow))
  return parts.join(', ')
}

/**
 * A rate needs both numbers; one alone is sent as given, and the API names what is missing. A
 * PATCH replaces the whole object: what the form does not show (the quota's alert thresholds, the
 * limits in units) goes back as `current` has it.
 */
export function limitsFromForm(form: FormData, current: Limits | null = null): Limits {
  const requests = numberOf(form, 'rate_requests')
  const perSeconds = numberOf(form, 'rate_per_seconds')
  const quota = numberOf(form, 'monthly_quota')
  const rate =
    requests === null && perSeconds === null
      ? null
      : ({ requests, per_seconds: perSeconds ?? 1 } as { requests: number; per_seconds: number })
  const thresholds = current?.monthly_quota?.alert_thresholds
  const monthlyQuota =
    quota === null
      ? null
      : thresholds === undefined
        ? { requests: quota }
        : { requests: quota, alert_thresholds: thresholds }
  return {
    rate,
    monthly_quota: monthlyQuota,
    ...(current?.meters === undefined ? {} : { meters: current.meters }),
    ...(current?.shadow === undefined ? {} : { shadow: current.shadow }),
  }
}
