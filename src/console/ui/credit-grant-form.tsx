// The form that grants a sub-account credits of a meter (POST …/credits/grants): the meter (its
// credit limits' and grants' meters offered), the units, an optional priority and expiry (UTC), and
// the API's refusals beside the field they name.
import { useState } from 'preact/hooks'
import { api } from './api.js'
import { Confirmation, doneAt, ErrorMessage, useAction } from './components.js'
import { describedBy, errorsByField, FieldErrors } from './field-errors.js'
import { fromUtcField } from './request-filters.js'
import type { CreditGrant } from './types.js'

const SUBJECTS = { meter: 'The meter', units: 'The units', priority: 'The priority', expires_at: 'The expiry' }

export function CreditGrantForm({
  subId,
  meters,
  onGranted,
}: {
  subId: string
  /** The meters to offer: those with a balance already. */
  meters: readonly string[]
  onGranted: (grant: CreditGrant) => void
}) {
  const action = useAction()
  const [saved, setSaved] = useState<string | null>(null)
  const errors = errorsByField(action.error, '/body', SUBJECTS)
  const submit = (e: Event) => {
    e.preventDefault()
    const formElement = e.currentTarget as HTMLFormElement
    const form = new FormData(formElement)
    const priority = String(form.get('priority') ?? '').trim()
    const expires = String(form.get('expires_at') ?? '')
    setSaved(null)
    action.run(async () => {
      const grant = await api<CreditGrant>('POST', `/${subId}/credits/grants`, {
        meter: String(form.get('meter') ?? '').trim(),
        units: Number(form.get('units')),
        ...(priority === '' ? {} : { priority: Number(priority) }),
        // The field is read as UTC, as every time the console shows.
        ...(expires === '' ? {} : { expires_at: fromUtcField(expires) }),
      })
      formElement.reset()
      setSaved(doneAt(`${grant.units} ${grant.meter} granted`))
      onGranted(grant)
    }, 'Credits granted')
  }
  const invalid = (field: keyof typeof SUBJECTS) => errors.has(field) || undefined
  return (
    <form class="card" onSubmit={submit} aria-labelledby="grant-title">
      <h2 id="grant-title">Grant credits</h2>
      <p class="help">
        A grant adds units to the meter's balance (a top-up). Use burns the grants of lower priority first, then those
        that expire soonest, then the oldest; what is left of a grant is gone at its expiry.
      </p>
      <div class="field">
        <label for="grant-meter">Meter</label>
        <input
          id="grant-meter"
          name="meter"
          required
          maxLength={32}
          class="mono"
          list="grant-meters"
          defaultValue={meters[0] ?? ''}
          aria-invalid={invalid('meter')}
          aria-describedby={describedBy(errors.has('meter') && 'grant-meter-error')}
        />
        <datalist id="grant-meters">
          {meters.map((meter) => (
            <option key={meter} value={meter} />
          ))}
        </datalist>
        <FieldErrors id="grant-meter-error" messages={errors.get('meter')} />
      </div>
      <div class="field">
        <label for="grant-units">Units</label>
        <input
          id="grant-units"
          name="units"
          type="number"
          required
          min={1}
          step={1}
          aria-invalid={invalid('units')}
          aria-describedby={describedBy(errors.has('units') && 'grant-units-error')}
        />
        <FieldErrors id="grant-units-error" messages={errors.get('units')} />
      </div>
      <div class="field">
        <label for="grant-priority">Priority (optional, 0 to 1000; lower burns first; default 100)</label>
        <input
          id="grant-priority"
          name="priority"
          type="number"
          min={0}
          max={1000}
          step={1}
          aria-invalid={invalid('priority')}
          aria-describedby={describedBy(errors.has('priority') && 'grant-priority-error')}
        />
        <FieldErrors id="grant-priority-error" messages={errors.get('priority')} />
      </div>
      <div class="field">
        <label for="grant-expires">Expires at (optional, UTC)</label>
        <input
          id="grant-expires"
          name="expires_at"
          type="datetime-local"
          aria-invalid={invalid('expires_at')}
          aria-describedby={describedBy(errors.has('expires_at') && 'grant-expires-error')}
        />
        <FieldErrors id="grant-expires-error" messages={errors.get('expires_at')} />
      </div>
      <ErrorMessage error={action.error} />
      <button type="submit" disabled={action.busy}>
        Grant credits
      </button>
      <Confirmation text={action.error === null ? saved : null} testId="grant-saved" />
    </form>
  )
}
