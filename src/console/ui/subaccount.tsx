// One sub-account: its details, the edit, limits and key policy forms, deactivate or reactivate,
// its keys, its usage and a link to its requests.
import { useEffect, useState } from 'preact/hooks'
import { ApiError, api } from './api.js'
import { Confirmation, CopyButton, doneAt, ErrorMessage, formatTime, Loading, useAction } from './components.js'
import { hasKeyPolicy, KeyPolicySection } from './key-policy.js'
import { KeysSection } from './keys.js'
import { LimitsFields, limitsFromForm } from './limits.js'
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
    if (to === 'deactivate' && !confirm(`Deactivate ${sub?.name}? Its keys are refused until it is reactivated.`))
      return
    change.run(
      async () => setSub(await api<SubAccount>('POST', `/${sub!.id}/${to}`)),
      to === 'deactivate' ? 'Sub-account deactivated' : 'Sub-account reactivated',
    )
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
            <a href={`#/events?target_id=${encodeURIComponent(sub.id)}`} class="action-link">
              Events<span class="visually-hidden"> of {sub.name}</span>
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
          <KeysSection subId={sub.id} policy={sub.key_policy} />
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

function EditForm({ sub, onSaved, confirmation }: FormProps) {
  const action = useAction()
  const submit = (e: Event) => {
    e.preventDefault()
    const form = new FormData(e.currentTarget as HTMLFormElement)
    const externalId = String(form.get('external_id') ?? '').trim()
    action.run(async () => {
      let metadata: unknown
      try {
        metadata = JSON.parse(String(form.get('metadata') ?? '{}') || '{}')
      } catch {
        throw new ApiError({
          status: 0,
          code: 'invalid_metadata',
          title: 'Metadata is not JSON',
          detail: 'Metadata must be a JSON object of strings, such as {"plan": "pro"}.',
        })
      }
      onSaved(
        await api<SubAccount>('PATCH', `/${sub.id}`, {
          name: String(form.get('name') ?? ''),
          external_id: externalId === '' ? null : externalId,
          metadata,
        }),
      )
    }, 'Sub-account saved')
  }
  return (
    <form class="card" onSubmit={submit} aria-labelledby="edit-title">
      <h2 id="edit-title">Details</h2>
      <div class="field">
        <label for="edit-name">Name</label>
        <input id="edit-name" name="name" required maxLength={200} value={sub.name} />
      </div>
      <div class="field">
        <label for="edit-external-id">External id</label>
        <input id="edit-external-id" name="external_id" maxLength={128} class="mono" value={sub.external_id ?? ''} />
      </div>
      <div class="field">
        <label for="edit-metadata">Metadata (JSON object of strings)</label>
        <textarea id="edit-metadata" name="metadata" rows={3} class="mono" value={JSON.stringify(sub.metadata)} />
      </div>
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
  const submit = (e: Event) => {
    e.preventDefault()
    const form = new FormData(e.currentTarget as HTMLFormElement)
    action.run(
      async () => onSaved(await api<SubAccount>('PATCH', `/${sub.id}`, { limits: limitsFromForm(form) })),
      'Limits saved',
    )
  }
  return (
    <form class="card" onSubmit={submit} aria-labelledby="limits-title">
      <h2 id="limits-title">Limits</h2>
      <LimitsFields prefix="edit" limits={sub.limits} />
      <ErrorMessage error={action.error} />
      <button type="submit" disabled={action.busy}>
        Save limits
      </button>
      <Confirmation text={action.error === null ? confirmation : null} testId="limits-saved" />
    </form>
  )
}
