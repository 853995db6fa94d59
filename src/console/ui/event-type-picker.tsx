// The event types a webhook endpoint subscribes to, picked from the catalogue (docs/events.md):
// a kind's every event (`api_key.*`, those added to it later too) or single types. The create and
// the edit forms share it; its checkboxes are named `event_types`, read with FormData.
import { TYPES } from './events.js'

/** The catalogue by resource: `sub_account` → its `*` and its types. */
const RESOURCES = [...new Set(TYPES.map((type) => type.slice(0, type.indexOf('.'))))].map((resource) => ({
  resource,
  types: TYPES.filter((type) => type.startsWith(`${resource}.`) && !type.endsWith('.*')),
}))

/** `idPrefix` keeps two forms' help ids apart; `checked` are the types ticked at first. */
export function EventTypesFieldset({ idPrefix, checked = [] }: { idPrefix: string; checked?: readonly string[] }) {
  return (
    <fieldset class="event-types" aria-describedby={`${idPrefix}-types-help`}>
      <legend>Event types</legend>
      <p id={`${idPrefix}-types-help`} class="help">
        Pick at least one: every event of a kind (and those added to it later), or single types.
      </p>
      {RESOURCES.map(({ resource, types }) => (
        <div key={resource} class="event-group">
          <label class="check">
            <input
              type="checkbox"
              name="event_types"
              value={`${resource}.*`}
              defaultChecked={checked.includes(`${resource}.*`)}
            />
            Every <span class="mono">{resource}</span> event (<span class="mono">{resource}.*</span>)
          </label>
          {types.map((type) => (
            <label key={type} class="check nested">
              <input type="checkbox" name="event_types" value={type} defaultChecked={checked.includes(type)} />
              <span class="mono">{type}</span>
            </label>
          ))}
        </div>
      ))}
    </fieldset>
  )
}
