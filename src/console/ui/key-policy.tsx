// A sub-account's key policy (docs/api.md#key-policies-and-ip-allow-lists): what it
// allows, shown; the form that replaces it (PATCH key_policy) or removes it (key_policy: null).
import { useRef } from 'preact/hooks'
import { api } from './api.js'
import { Confirmation, ErrorMessage, useAction } from './components.js'
import { describedBy, errorsByField, FieldErrors, listOf } from './field-errors.js'
import type { KeyPolicy, SubAccount } from './types.js'

const UNITS = [
  { name: 'days', seconds: 86_400 },
  { name: 'hours', seconds: 3_600 },
  { name: 'minutes', seconds: 60 },
  { name: 'seconds', seconds: 1 },
] as const

/** The largest unit that holds `seconds` whole: 2592000 is 30 days. */
function inUnits(seconds: number): { amount: number; unit: (typeof UNITS)[number] } {
  const unit = UNITS.find((u) => seconds % u.seconds === 0) ?? UNITS[3]
  return { amount: seconds / unit.seconds, unit }
}

export function describeDuration(seconds: number): string {
  const { amount, unit } = inUnits(seconds)
  return `${amount} ${amount === 1 ? unit.name.slice(0, -1) : unit.name}`
}

/** A rate's window in words: "per hour", "per 30 seconds", "per 2 days" (never "3600 s"). */
export function perDuration(seconds: number): string {
  const words = describeDuration(seconds)
  return `per ${words.startsWith('1 ') ? words.slice(2) : words}`
}

export function hasKeyPolicy(policy: KeyPolicy): boolean {
  return policy.allowed_scopes !== null || policy.max_ttl_seconds !== null || policy.ip_allowlist !== null
}

const SUBJECTS = {
  allowed_scopes: 'Allowed scopes',
  max_ttl_seconds: 'The longest life, in seconds,',
  ip_allowlist: 'The IP allow-list',
}

export function KeyPolicySection({
  sub,
  onSaved,
  confirmation = null,
}: {
  sub: SubAccount
  onSaved: (s: SubAccount) => void
  /** What the last save did, shown under the buttons (the screen keeps it: a save remounts this). */
  confirmation?: string | null
}) {
  // Uncontrolled fields (defaultValue): a refused save leaves what was typed beside its errors; a
  // saved one remounts the form (keyed by updated_at) with what the API keeps.
  const policy = sub.key_policy
  const save = useAction()
  const remove = useAction()
  // What was sent, to name a refused entry (`/body/key_policy/ip_allowlist/1`) by its value.
  const sent = useRef<Record<string, string[]>>({})
  const errors = errorsByField(save.error, '/body/key_policy', SUBJECTS, sent.current)
  const ttl = policy.max_ttl_seconds === null ? null : inUnits(policy.max_ttl_seconds)

  const submit = (e: Event) => {
    e.preventDefault()
    const form = new FormData(e.currentTarget as HTMLFormElement)
    const amount = String(form.get('max_ttl') ?? '').trim()
    const unit = UNITS.find((u) => u.name === form.get('max_ttl_unit')) ?? UNITS[0]
    const next: KeyPolicy = {
      allowed_scopes: listOf(String(form.get('allowed_scopes') ?? '')),
      // A fraction of a unit is whole seconds to the API; the API says when that is too short.
      max_ttl_seconds: amount === '' ? null : Math.round(Number(amount) * unit.seconds),
      ip_allowlist: listOf(String(form.get('ip_allowlist') ?? '')),
    }
    sent.current = { allowed_scopes: next.allowed_scopes ?? [], ip_allowlist: next.ip_allowlist ?? [] }
    remove.clear()
    save.run(
      async () => onSaved(await api<SubAccount>('PATCH', `/${sub.id}`, { key_policy: next })),
      'Key policy saved',
    )
  }
  const removePolicy = () => {
    save.clear()
    remove.run(
      async () => onSaved(await api<SubAccount>('PATCH', `/${sub.id}`, { key_policy: null })),
      'Key policy removed',
    )
  }

  return (
    <form class="card" onSubmit={submit} aria-labelledby="policy-title">
      <h2 id="policy-title">Key policy</h2>
      <dl class="facts" data-testid="key-policy">
        <dt>Allowed scopes</dt>
        <dd class={policy.allowed_scopes === null ? undefined : 'mono'}>
          {policy.allowed_scopes?.join(' ') ?? "any (within the account's scope ceiling)"}
        </dd>
        <dt>Longest key life</dt>
        <dd>{policy.max_ttl_seconds === null ? 'no limit' : describeDuration(policy.max_ttl_seconds)}</dd>
        <dt>IP allow-list</dt>
        <dd class={policy.ip_allowlist === null ? undefined : 'mono'}>
          {policy.ip_allowlist?.join(' ') ?? 'any address'}
        </dd>
      </dl>
      <p class="help" id="policy-effect">
        A change holds for the keys minted after it: the keys minted before keep their scopes and their expiry (revoke
        them to be rid of them). The IP allow-list holds for every key of the sub-account at once, those minted before
        too.
      </p>
      <div class="field">
        <label for="policy-scopes">Allowed scopes or patterns (blank: any)</label>
        <input
          id="policy-scopes"
          name="allowed_scopes"
          class="mono"
          placeholder="tracking:* orders:read"
          defaultValue={policy.allowed_scopes?.join(' ') ?? ''}
          aria-invalid={errors.has('allowed_scopes') || undefined}
          aria-describedby={describedBy('policy-scopes-help', errors.has('allowed_scopes') && 'policy-scopes-error')}
        />
        <span id="policy-scopes-help" class="help hint">
          Space or comma separated; tracking:* allows every tracking: scope.
        </span>
        <FieldErrors id="policy-scopes-error" messages={errors.get('allowed_scopes')} />
      </div>
      <fieldset>
        <legend>Longest key life (blank: no limit)</legend>
        <div class="inline-fields">
          <div class="field">
            <label for="policy-ttl">Longest key life</label>
            <input
              id="policy-ttl"
              name="max_ttl"
              type="number"
              min={0}
              step="any"
              inputMode="decimal"
              defaultValue={ttl === null ? '' : String(ttl.amount)}
              aria-invalid={errors.has('max_ttl_seconds') || undefined}
              aria-describedby={describedBy(errors.has('max_ttl_seconds') && 'policy-ttl-error')}
            />
          </div>
          <div class="field">
            <label for="policy-ttl-unit">Unit</label>
            <select id="policy-ttl-unit" name="max_ttl_unit">
              {UNITS.map((u) => (
                <option key={u.name} value={u.name} selected={u.name === (ttl?.unit.name ?? 'days')}>
                  {u.name}
                </option>
              ))}
            </select>
          </div>
        </div>
        <FieldErrors id="policy-ttl-error" messages={errors.get('max_ttl_seconds')} />
      </fieldset>
      <div class="field">
        <label for="policy-ips">IP allow-list of every key (empty: any address)</label>
        <textarea
          id="policy-ips"
          name="ip_allowlist"
          rows={3}
          class="mono"
          placeholder={'203.0.113.0/24\n2001:db8::/48'}
          defaultValue={policy.ip_allowlist?.join('\n') ?? ''}
          aria-invalid={errors.has('ip_allowlist') || undefined}
          aria-describedby={describedBy('policy-ips-help', errors.has('ip_allowlist') && 'policy-ips-error')}
        />
        <span id="policy-ips-help" class="help hint">
          One address or CIDR a line, or comma separated.
        </span>
        <FieldErrors id="policy-ips-error" messages={errors.get('ip_allowlist')} />
      </div>
      <ErrorMessage error={save.error} />
      <ErrorMessage error={remove.error} />
      <div class="actions">
        <button type="submit" disabled={save.busy || remove.busy}>
          Save key policy
        </button>
        <button
          type="button"
          class="danger"
          disabled={save.busy || remove.busy || !hasKeyPolicy(policy)}
          onClick={removePolicy}
        >
          Remove the policy
        </button>
      </div>
      <Confirmation text={save.error === null && remove.error === null ? confirmation : null} testId="policy-saved" />
    </form>
  )
}
