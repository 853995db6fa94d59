// Passive health (docs/configuration.md, routes: `outlier`), as Envoy's outlier detection with
// consecutive failures: a target whose requests fail `eject_after` times in a row is taken out for
// 30 s, doubled each time it is taken out again (at most 300 s); then one request tries it, and its
// outcome puts it back or takes it out again. At most `max_ejected_percent` of a route's targets
// (rounded down) are out at once, so that a fault of the gateway's own network cannot empty a
// route. Plain logic on an injected clock: no timer, an ejection ends when a pick sees it over.
import type { OutlierOptions } from './route-options.js'

/** How long a first ejection lasts, and the most any does. */
export const BASE_EJECTION_MS = 30_000
export const MAX_EJECTION_MS = 300_000

/** One target's passive health; the route's Outlier reads and writes it. */
export class OutlierState {
  /** Failures since its last success. */
  failures = 0
  /** Times it was taken out since it last stayed in for MAX_EJECTION_MS; the back-off doubles with each. */
  ejections = 0
  /** When its ejection ends (ms, the clock's); 0: not ejected. Past it, until the trial's outcome, it is on trial. */
  ejectedUntil = 0
  /** Its one trial request is in flight: no other until it settles. */
  trialInFlight = false
  /** When it last came back from an ejection. */
  returnedAt = 0
}

/** What a request's answer says of its target's health. */
export type Outcome = 'success' | 'failure' | 'neutral'

export class Outlier {
  private readonly options: OutlierOptions
  private readonly states: readonly OutlierState[]
  private readonly clock: () => number
  private readonly onEject: (index: number) => void
  /** How many may be out at once. */
  readonly maxEjected: number
  /**
   * How many are out or on trial (ejectedUntil set), kept as they go and come back: while none is,
   * a pick needs neither the clock nor a look at each target (route-upstreams.ts).
   */
  out = 0
  constructor(
    options: OutlierOptions,
    states: readonly OutlierState[],
    clock: () => number,
    onEject: (index: number) => void,
  ) {
    this.options = options
    this.states = states
    this.clock = clock
    this.onEject = onEject
    this.maxEjected = Math.floor((states.length * options.maxEjectedPercent) / 100)
  }

  /** Whether the target may take a request at `now`: in, or on trial with no trial request yet. */
  admits(state: OutlierState, now: number): boolean {
    if (state.ejectedUntil === 0) return true
    return state.ejectedUntil <= now && !state.trialInFlight
  }

  /** Out at `now`: ejected and not yet on trial. */
  isEjected(state: OutlierState, now: number): boolean {
    return state.ejectedUntil > now
  }

  /** A request leaves for the target: on trial, it is the one trial request. */
  dispatched(state: OutlierState, now: number): void {
    if (state.ejectedUntil !== 0 && state.ejectedUntil <= now) state.trialInFlight = true
  }

  /** The request's answer (or failure) came back. */
  settled(index: number, outcome: Outcome): void {
    const state = this.states[index]!
    const onTrial = state.trialInFlight
    state.trialInFlight = false
    if (outcome === 'neutral') return
    if (outcome === 'success') {
      state.failures = 0
      if (onTrial) {
        state.ejectedUntil = 0
        state.returnedAt = this.clock()
        this.out--
      }
      return
    }
    const now = this.clock()
    state.failures++
    // A trial that failed goes out again, its place already counted; otherwise only within the cap.
    if (onTrial) this.eject(index, now)
    else if (state.ejectedUntil === 0 && state.failures >= this.options.ejectAfter && this.out < this.maxEjected)
      this.eject(index, now)
  }

  private eject(index: number, now: number): void {
    const state = this.states[index]!
    // A target that stayed in for the longest back-off starts again from the first.
    if (state.ejections > 0 && state.ejectedUntil === 0 && now - state.returnedAt >= MAX_EJECTION_MS)
      state.ejections = 0
    // A failed trial goes out again, already counted.
    if (state.ejectedUntil === 0) this.out++
    state.ejectedUntil = now + Math.min(BASE_EJECTION_MS * 2 ** state.ejections, MAX_EJECTION_MS)
    state.ejections++
    state.failures = 0
    this.onEject(index)
  }
}
