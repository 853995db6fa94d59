// The limits fields (rate and monthly quota) of the create and edit forms; blank means no limit.
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
          value={limits?.rate?.requests ?? ''}
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
          value={limits?.rate?.per_seconds ?? ''}
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
          value={limits?.monthly_quota?.requests ?? ''}
        />
      </div>
    </fieldset>
  )
}

const numberOf = (form: FormData, name: string): number | null => {
  const raw = String(form.get(name) ?? '').trim()
  return raw === '' ? null : Number(raw)
}

/** A rate needs both numbers; one alone is sent as given, and the API names what is missing. */
export function limitsFromForm(form: FormData): Limits {
  const requests = numberOf(form, 'rate_requests')
  const perSeconds = numberOf(form, 'rate_per_seconds')
  const quota = numberOf(form, 'monthly_quota')
  const rate =
    requests === null && perSeconds === null
      ? null
      : ({ requests, per_seconds: perSeconds ?? 1 } as { requests: number; per_seconds: number })
  return { rate, monthly_quota: quota === null ? null : { requests: quota } }
}
