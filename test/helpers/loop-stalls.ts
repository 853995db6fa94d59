// When a process's event loop could not run: on a loaded machine a stall can outlast a test's short
// timers, and then a timer's answer is right though the test did not ask for it.

/** A stall: from the last time the loop ran to the next, on the wall clock (Date.now()). */
export type Stall = readonly [from: number, to: number]

const TICK_MS = 10

/**
 * Records each time the loop could not run for `minMs` or longer (a 10 ms timer that came that
 * late), until stopped; `recorded` reads them, `take` hands them over and forgets them. The timer
 * is unref'd: it keeps no process alive.
 */
export function recordLoopStalls(minMs: number): { recorded(): readonly Stall[]; take(): Stall[]; stop(): void } {
  let stalls: Stall[] = []
  let last = Date.now()
  const timer = setInterval(() => {
    const now = Date.now()
    if (now - last - TICK_MS >= minMs) stalls.push([last, now])
    last = now
  }, TICK_MS).unref()
  return {
    recorded: () => stalls,
    take: () => {
      const taken = stalls
      stalls = []
      return taken
    },
    stop: () => clearInterval(timer),
  }
}

/** Whether a stall overlaps the time from `from` to `to`. */
export const stalledWithin = (stalls: readonly Stall[], from: number, to: number): boolean =>
  stalls.some(([start, end]) => start < to && end > from)
