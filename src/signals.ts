// The rules of a stop (docs/operations.md, Shutdown): what each signal or error of the process does
// while the gateway serves and while it closes. A state and a function from an event to the next
// state and what to do, with the clock passed in: start.ts acts, test/unit/signals.test.ts holds
// each rule.

/** The signals that ask for a graceful stop, and when sent again later, for an immediate one. */
export const STOP_SIGNALS = ['SIGTERM', 'SIGINT'] as const
/** A stop signal again within this long is a copy passed on by npm or a terminal, not a second request. */
export const RELAYED_WITHIN_MS = 1_000
/** Signals that close the gateway as SIGTERM does, and once it closes, end it at once (close-with-grace's set). */
export const OTHER_SIGNALS = [
  'SIGQUIT',
  'SIGILL',
  'SIGTRAP',
  'SIGABRT',
  'SIGBUS',
  'SIGFPE',
  'SIGSEGV',
  'SIGUSR2',
] as const satisfies readonly NodeJS.Signals[]
/** Every signal start.ts listens for. */
export const HANDLED_SIGNALS = [...STOP_SIGNALS, 'SIGHUP', ...OTHER_SIGNALS] as const

export type ProcessEvent =
  | { kind: 'signal'; name: NodeJS.Signals }
  /** An unhandled rejection, or an uncaught exception (`fatal`): a bug. */
  | { kind: 'error'; error: unknown; fatal: boolean }

export type StopState =
  | { phase: 'serving' }
  | {
      phase: 'closing'
      /** The stop signal that counts as the first, and when it came; null until one has. */
      stop: { name: NodeJS.Signals; at: number } | null
      /** The first error, if any: the drain then exits 1. */
      failure: { error: unknown } | null
    }

export type StopAction =
  /** Start the drain, naming its cause in the log. */
  | { do: 'drain'; signal: NodeJS.Signals | undefined; failure: { error: unknown } | null }
  /** A copy of a signal, or a signal that changes nothing now. */
  | { do: 'ignore' }
  /** An error during the drain: logged; the exit is 1 but the drain goes on. */
  | { do: 'note'; error: unknown }
  /** End the process now, exit 1, after this line. */
  | { do: 'quit'; line: string; error?: unknown }

export const SERVING: StopState = { phase: 'serving' }

/** What the event does in `state` at `now` (ms), and the state after it. */
export function onProcessEvent(
  state: StopState,
  event: ProcessEvent,
  now: number,
): { state: StopState; action: StopAction } {
  if (event.kind === 'error') {
    if (state.phase === 'serving')
      return {
        state: { phase: 'closing', stop: null, failure: { error: event.error } },
        action: { do: 'drain', signal: undefined, failure: { error: event.error } },
      }
    // A second uncaught exception ends the process (close-with-grace's rule); a rejection only
    // makes the exit 1.
    if (event.fatal) return { state, action: { do: 'quit', line: 'second error, exiting', error: event.error } }
    return {
      state: { ...state, failure: state.failure ?? { error: event.error } },
      action: { do: 'note', error: event.error },
    }
  }
  const name = event.name
  if ((STOP_SIGNALS as readonly string[]).includes(name)) {
    if (state.phase === 'serving')
      return {
        state: { phase: 'closing', stop: { name, at: now }, failure: null },
        action: { do: 'drain', signal: name, failure: null },
      }
    // The first stop signal after a hangup's drain (or an error's) began counts as the first.
    if (state.stop === null) return { state: { ...state, stop: { name, at: now } }, action: { do: 'ignore' } }
    // Either stop signal within the second is the same request: npm, tsx and a terminal pass
    // the one they got on, and a Ctrl-C with a group's SIGTERM means no more than one of them.
    if (now - state.stop.at < RELAYED_WITHIN_MS) return { state, action: { do: 'ignore' } }
    return { state, action: { do: 'quit', line: `second ${name}, exiting` } }
  }
  if (state.phase === 'serving')
    return {
      state: { phase: 'closing', stop: null, failure: null },
      action: { do: 'drain', signal: name, failure: null },
    }
  // A hangup (a terminal closed, often just after its Ctrl-C) never cuts a drain short.
  if (name === 'SIGHUP') return { state, action: { do: 'ignore' } }
  return { state, action: { do: 'quit', line: `second ${name}, exiting` } }
}

/** The exit code once the drain is over. */
export function exitCode(state: StopState): number {
  return state.phase === 'closing' && state.failure !== null ? 1 : 0
}

/** The rules with their state and clock: `hear` an event, do what it says. */
export class StopRules {
  #state: StopState = SERVING
  readonly #clock: () => number

  constructor(clock: () => number = Date.now) {
    this.#clock = clock
  }

  hear(event: ProcessEvent): StopAction {
    const next = onProcessEvent(this.#state, event, this.#clock())
    this.#state = next.state
    return next.action
  }

  /** The exit code once the drain is over: 1 if an error started it or came during it. */
  exitCode(): number {
    return exitCode(this.#state)
  }
}
