// The parent's plans as the forms pick among them: the sub-account's page (plans.tsx, PlanPicker)
// and the new sub-account's form (subaccounts.tsx).
import { useEffect, useState } from 'preact/hooks'
import { api, type Page } from './api.js'
import { useAction } from './components.js'
import type { Plan } from './types.js'

/** The parent's plans, oldest first (the first 100: a parent sells a few); `reload` reads them again. */
export function usePlans(): { plans: Plan[] | null; error: unknown; reload: () => void } {
  const [plans, setPlans] = useState<Plan[] | null>(null)
  const [round, setRound] = useState(0)
  const load = useAction()
  useEffect(() => {
    load.run(async (current) => {
      const page = await api<Page<Plan>>('GET', '/plans?limit=100')
      if (current()) setPlans(page.data)
    })
  }, [round])
  return { plans, error: load.error, reload: () => setRound((n) => n + 1) }
}

/** A `plan_id` field: one of `plans`, or none (then the account's default plan, if any). */
export function PlanSelect({ id, plans, chosen }: { id: string; plans: Plan[]; chosen: string | null }) {
  return (
    <div class="field">
      <label for={id}>Plan</label>
      <select id={id} name="plan_id" defaultValue={chosen ?? ''}>
        <option value="">No plan of its own (the default plan, if any)</option>
        {plans.map((plan) => (
          <option key={plan.id} value={plan.id}>
            {plan.name}
          </option>
        ))}
      </select>
    </div>
  )
}
