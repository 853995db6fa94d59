// One sub-account: its details, the edit, limits and key policy forms, deactivate or reactivate,
// its keys, its portal links, its usage and links to its requests, events and credits.
import { useEffect, useRef, useState } from 'preact/hooks'
import { ApiError, api } from './api.js'
import { Confirmation, CopyButton, doneAt, ErrorMessage, formatTime, Loading, useAction } from './components.js'
import { hasKeyPolicy, KeyPolicySection } from './key-policy.js'
import { KeysSection } from './keys.js'
import { ShadowLimitsSection, useLimitPreview } from './limit-preview.js'
import { LimitsFields, limitsFromForm } from './limits.js'
import { PlanPicker } from './plans.js'
import { PortalSessionsSection } from './portal-sessions.js'
import { requestsHash } from './request-filters.js'
import { describeLimits } from './subaccounts.js'
import type { SubAccount } from './types.js'
import { UsagePanel } from './usage.js'

export function SubAccountScreen({ id }: { id: string }) {
  const [sub, setSub] = useState<SubAccount | null>(null)
  // Which form saved last, and when: shown in that form. The forms remount on a save (keyed by
  // updated_at), so the confirmation lives here, not in their own state.
  const [saved, setSaved] = useState<{ form: 'edit' | 'limits' | 'policy'; text: string } | null>(null)
  const savedBy = (form: 'edit' | 'limits' | 'policy', what: string) => (next: SubAccount) => {
    setSub(next)
    setSaved({ form, text: doneAt(what) })
  }
  const confirmation = (form: 'edit' | 'limits' | 'policy') => (saved?.form === form ? saved.text : null)
  const load = useAction()
  const change = useAction()
  useEffect(() => {
    load.run(async (current) => {
      const found = await api<SubAccount>('GET', `/${encodeURIComponent(id)}`)
      if (current()) setSub(found)
    })
  }, [id])

  const setStatus = (to: 'deactivate' | 'reactivate') => {
    const changing = async () => setSub(await api<SubAccount>('POST', `/${sub!.id}/${to}`))
    if (to === 'deactivate')
      change.runIfConfirmed(
        `Deactivate ${sub?.name}? Its keys are refused until it is reactivated.`,
        changing,
        'Sub-account deactivated',
      )
    else void change.run(changing, 'Sub-account reactivated')
  }

  return (
    <section aria-labelledby="sub-title">
      <p>
        <a href="#/sub-accounts">← All sub-accounts</a>
      </p>
      <ErrorMessage error={load.error} />
      {sub === null && load.error === null && <Loading what="the sub-account" />}
      {sub !== null && (
        <>
          <div class="heading-row">
            <h1 id="sub-title">{sub.name}</h1>
            <span class={`badge ${sub.status}`} data-testid="sub-status">
              {sub.status}
            </span>
          </div>
          <dl class="facts">
            <dt>Id</dt>
            <dd>
              <span class="mono" data-testid="sub-id">
                {sub.id}
              </span>{' '}
              <CopyButton value={sub.id} what="the sub-account id" />
            </dd>
            <dt>External id</dt>
            <dd>
              <span class="mono">{sub.external_id ?? '—'}</span>
              {sub.external_id !== null && (
                <>
                  {' '}
                  <CopyButton value={sub.external_id} what="the external id" />
                </>
              )}
            </dd>
            <dt>Limits</dt>
            <dd data-testid="sub-limits">{describeLimits(sub)}</dd>
            <dt>Created</dt>
            <dd>{formatTime(sub.created_at)}</dd>
            {sub.deactivated_at !== null && (
              <>
                <dt>Deactivated</dt>
                <dd>{formatTime(sub.deactivated_at)}</dd>
              </>
            )}
          </dl>
          <div class="actions">
            <a href={requestsHash({ sub_account_id: sub.id })} class="action-link">
              Requests
            </a>
            <a href={`#/events?sub_account_id=${encodeURIComponent(sub.id)}`} class="action-link">
              Events<span class="visually-hidden"> of {sub.name}</span>
            </a>
            <a href={`#/sub-accounts/${encodeURIComponent(sub.id)}/credits`} class="action-link">
              Credits<span class="visually-hidden"> of {sub.name}</span>
            </a>
            {sub.status === 'active' ? (
              <button type="button" class="danger" disabled={change.busy} onClick={() => setStatus('deactivate')}>
                Deactivate
              </button>
            ) : (
              <button type="button" disabled={change.busy} onClick={() => setStatus('reactivate')}>
                Reactivate
              </button>
            )}
          </div>
          <ErrorMessage error={change.error} />
          <div class="columns">
            <EditForm
              key={`edit-${sub.updated_at}`}
              sub={sub}
              onSaved={savedBy('edit', 'Details saved')}
              confirmation={confirmation('edit')}
            />
            <LimitsForm
              key={`limits-${sub.updated_at}`}
              sub={sub}
              onSaved={savedBy('limits', 'Limits saved')}
              confirmation={confirmation('limits')}
            />
            <KeyPolicySection
              key={`policy-${sub.updated_at}`}
              sub={sub}
              onSaved={(next) =>
                savedBy('policy', hasKeyPolicy(next.key_policy) ? 'Key policy saved' : 'Key policy removed')(next)
              }
              confirmation={confirmation('policy')}
            />
          </div>
          <PlanPicker key={`plan-${sub.updated_at}`} sub={sub} onSaved={setSub} />
          {sub.limits.shadow !== undefined && <ShadowLimitsSection subAccountId={sub.id} shadow={sub.limits.shadow} />}
          <KeysSection subId={sub.id} policy={sub.key_policy} />
          {sub.status === 'active' && <PortalSessionsSection subId={sub.id} />}
          <UsagePanel subAccount={sub} />
        </>
      )}
    </section>
  )
}

interface FormProps {
  sub: SubAccount
  onSaved: (s: SubAccount) => void
  confirmation: string | null
}

/** A metadata field being edited: its key and value, and a stable id for its row. */
interface Field {
  id: number
  key: string
  value: string
}

/** The API's bounds on metadata (docs/api.md): at most 50 keys of 1 to 40 characters, values up to 500. */
const METADATA_MAX_KEYS = 50

function EditForm({ sub, onSaved, confirmation }: FormProps) {
  const action = useAction()
  const nextId = useRef(0)
  const field = (key: string, value: string): Field => ({ id: nextId.current++, key, value })
  const [fields, setFields] = useState<Field[]>(() => Object.entries(sub.metadata).map(([k, v]) => field(k, v)))
  const edit = (id: number, change: Partial<Field>) =>
    setFields((all) => all.map((f) => (f.id === id ? { ...f, ...change } : f)))
  const submit = (e: Event) => {
    e.preventDefault()
    const form = new FormData(e.currentTarget as HTMLFormElement)
    const externalId = String(form.get('external_id') ?? '').trim()
    action.run(async () => {
      // A Map: a key is data (`constructor`, `__proto__` are keys like any other), never a property.
      const metadata = new Map<string, string>()
      for (const f of fields) {
        const key = f.key.trim()
        if (key === '' && f.value === '') continue // an empty row is no field
        if (key === '' || metadata.has(key))
          throw new ApiError({
            status: 0,
            code: 'invalid_metadata',
            title: key === '' ? 'A metadata value has no key' : `The metadata key “${key}” is there twice`,
            detail: 'Each metadata field needs a key of its own (1 to 40 characters); remove the field, or name it.',
          })
        metadata.set(key, f.value)
      }
      onSaved(
        await api<SubAccount>('PATCH', `/${sub.id}`, {
          name: String(form.get('name') ?? ''),
          external_id: externalId === '' ? null : externalId,
          // fromEntries defines each key as an own property, `__proto__` included.
          metadata: Object.fromEntries(metadata),
        }),
      )
    }, 'Sub-account saved')
  }
  return (
    <form class="card" onSubmit={submit} aria-labelledby="edit-title">
      <h2 id="edit-title">Details</h2>
      <div class="field">
        <label for="edit-name">Name</label>
        {/* Uncontrolled (defaultValue): a change of the metadata rows re-renders the form, and a value
            prop would put the saved name back over what was typed. */}
        <input id="edit-name" name="name" required maxLength={200} defaultValue={sub.name} />
      </div>
      <div class="field">
        <label for="edit-external-id">External id</label>
        <input
          id="edit-external-id"
          name="external_id"
          maxLength={128}
          class="mono"
          defaultValue={sub.external_id ?? ''}
        />
      </div>
      <fieldset class="metadata" data-testid="metadata">
        <legend>Metadata</legend>
        {fields.length === 0 && <p class="help">No fields.</p>}
        {fields.map((f, i) => (
          <div class="metadata-row" key={f.id}>
            <div class="field">
              <label for={`meta-key-${f.id}`}>Key {i + 1}</label>
              <input
                id={`meta-key-${f.id}`}
                class="mono"
                maxLength={40}
                value={f.key}
                onInput={(e) => edit(f.id, { key: e.currentTarget.value })}
              />
            </div>
            <div class="field">
              <label for={`meta-value-${f.id}`}>Value {i + 1}</label>
              <input
                id={`meta-value-${f.id}`}
                maxLength={500}
                value={f.value}
                onInput={(e) => edit(f.id, { value: e.currentTarget.value })}
              />
            </div>
            <button
              type="button"
              class="danger small"
              onClick={() => setFields((all) => all.filter((other) => other.id !== f.id))}
            >
              Remove
              <span class="visually-hidden">
                {' '}
                field {i + 1}
                {f.key === '' ? '' : ` (${f.key})`}
              </span>
            </button>
          </div>
        ))}
        <button
          type="button"
          class="secondary small"
          disabled={fields.length >= METADATA_MAX_KEYS}
          onClick={() => setFields((all) => [...all, field('', '')])}
        >
          Add a field
        </button>
      </fieldset>
      <ErrorMessage error={action.error} />
      <button type="submit" disabled={action.busy}>
        Save details
      </button>
      <Confirmation text={action.error === null ? confirmation : null} testId="edit-saved" />
    </form>
  )
}

function LimitsForm({ sub, onSaved, confirmation }: FormProps) {
  const action = useAction()
  const preview = useLimitPreview(sub.id, sub.limits, () => sub.name)
  const submit = (e: Event) => {
    e.preventDefault()
    const form = new FormData(e.currentTarget as HTMLFormElement)
    action.run(
      async () => onSaved(await api<SubAccount>('PATCH', `/${sub.id}`, { limits: limitsFromForm(form, sub.limits) })),
      'Limits saved',
    )
  }
  return (
    <form class="card" onSubmit={submit} aria-labelledby="limits-title">
      <h2 id="limits-title">Limits</h2>
      <LimitsFields prefix="edit" limits={sub.limits} />
      <ErrorMessage error={action.error} />
      <div class="actions">
        <button type="submit" disabled={action.busy}>
          Save limits
        </button>
        {preview.button}
      </div>
      <Confirmation text={action.error === null ? confirmation : null} testId="limits-saved" />
      {preview.result}
    </form>
  )
}
