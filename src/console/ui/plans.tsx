// Plans: limits defined once and given to many sub-accounts (docs/api.md, Plans). The list with
// each plan's limits, a create form, a delete (refused while a sub-account or the default names
// the plan), and the account's default plan. The sub-account page has the picker (PlanPicker).
import { useEffect, useState } from 'preact/hooks'
import { api } from './api.js'
import { Confirmation, doneAt, Empty, ErrorMessage, Loading, useAction } from './components.js'
import { CardTable } from './list-table.js'
import { LimitsFields, limitsFromForm } from './limits.js'
import { PlanSelect, usePlans } from './plan-select.js'
import { describeLimits } from './subaccounts.js'
import type { Plan, SubAccount } from './types.js'

export function PlansScreen() {
  const { plans, error, reload } = usePlans()
  const [defaultPlan, setDefaultPlan] = useState<string | null | undefined>(undefined)
  const [saved, setSaved] = useState<string | null>(null)
  const create = useAction()
  const change = useAction()
  useEffect(() => {
    change.run(async (current) => {
      const settings = await api<{ default_plan_id: string | null }>('GET', '/settings')
      if (current()) setDefaultPlan(settings.default_plan_id)
    })
  }, [])

  const submit = (e: Event) => {
    e.preventDefault()
    const formElement = e.currentTarget as HTMLFormElement
    const form = new FormData(formElement)
    create.run(async () => {
      await api<Plan>('POST', '/plans', { name: String(form.get('name') ?? ''), limits: limitsFromForm(form) })
      formElement.reset()
      setSaved(doneAt('Plan created'))
      reload()
    }, 'Plan created')
  }
  const remove = (plan: Plan) =>
    change.runIfConfirmed(
      `Delete the plan ${plan.name}?`,
      async () => {
        await api('DELETE', `/plans/${plan.id}`)
        reload()
      },
      'Plan deleted',
    )
  const setDefault = (id: string) =>
    change.run(async () => {
      const settings = await api<{ default_plan_id: string | null }>('PATCH', '/settings', {
        default_plan_id: id === '' ? null : id,
      })
      setDefaultPlan(settings.default_plan_id)
    }, 'Default plan saved')

  return (
    <section aria-labelledby="plans-title">
      <h1 id="plans-title">Plans</h1>
      <p>
        A plan holds limits for many sub-accounts: each kind of limit a sub-account does not set itself comes from its
        plan, or from the default plan when it has none. A change of a plan holds for all of them within a second.
      </p>
      <ErrorMessage error={error} />
      <ErrorMessage error={change.error} />
      {plans === null && error === null && <Loading what="the plans" />}
      {plans !== null && plans.length === 0 && <Empty>No plan yet.</Empty>}
      {plans !== null && plans.length > 0 && (
        <CardTable testId="plans" caption="Plans" columns={['Name', 'Limits', 'Actions']}>
          {plans.map((plan) => (
            <tr key={plan.id}>
              <td data-label="Name">{plan.name}</td>
              <td data-label="Limits">{describeLimits(plan)}</td>
              <td data-label="Actions">
                <button type="button" class="danger small" disabled={change.busy} onClick={() => remove(plan)}>
                  Delete<span class="visually-hidden"> the plan {plan.name}</span>
                </button>
              </td>
            </tr>
          ))}
        </CardTable>
      )}
      {plans !== null && defaultPlan !== undefined && (
        <div class="field">
          <label for="default-plan">Default plan of sub-accounts without one</label>
          <select id="default-plan" value={defaultPlan ?? ''} onChange={(e) => setDefault(e.currentTarget.value)}>
            <option value="">None</option>
            {plans.map((plan) => (
              <option key={plan.id} value={plan.id}>
                {plan.name}
              </option>
            ))}
          </select>
        </div>
      )}
      <form class="card" onSubmit={submit} aria-labelledby="new-plan-title">
        <h2 id="new-plan-title">New plan</h2>
        <div class="field">
          <label for="plan-name">Name</label>
          <input id="plan-name" name="name" required maxLength={200} />
        </div>
        <LimitsFields prefix="plan" limits={null} />
        <ErrorMessage error={create.error} />
        <button type="submit" disabled={create.busy}>
          Create plan
        </button>
        <Confirmation text={create.error === null ? saved : null} testId="plan-created" />
      </form>
    </section>
  )
}

/** The sub-account's plan: one of the parent's, or none (then the default plan, if any). */
export function PlanPicker({ sub, onSaved }: { sub: SubAccount; onSaved: (s: SubAccount) => void }) {
  const { plans, error } = usePlans()
  const action = useAction()
  const [saved, setSaved] = useState<string | null>(null)
  const submit = (e: Event) => {
    e.preventDefault()
    const chosen = String(new FormData(e.currentTarget as HTMLFormElement).get('plan_id') ?? '')
    action.run(async () => {
      onSaved(await api<SubAccount>('PATCH', `/${sub.id}`, { plan_id: chosen === '' ? null : chosen }))
      setSaved(doneAt('Plan saved'))
    }, 'Plan saved')
  }
  return (
    <form class="card" onSubmit={submit} aria-labelledby="plan-title">
      <h2 id="plan-title">Plan</h2>
      <ErrorMessage error={error ?? action.error} />
      {plans === null && error === null && <Loading what="the plans" />}
      {plans !== null && (
        <>
          <PlanSelect id="sub-plan" plans={plans} chosen={sub.plan_id} />
          <p class="help" data-testid="effective-limits">
            Limits in force: {describeLimits({ limits: sub.effective_limits })}
          </p>
          <button type="submit" disabled={action.busy}>
            Save plan
          </button>
        </>
      )}
      <Confirmation text={action.error === null ? saved : null} testId="plan-saved" />
    </form>
  )
}
