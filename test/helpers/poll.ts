// Waiting in tests: polling until something holds, sleeping, giving up on a promise.

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/**
 * Polls `check` every `everyMs` until it returns true or `timeoutMs` passed; returns the time it
 * took, or null when it never held.
 */
export async function eventually(
  timeoutMs: number,
  check: () => Promise<boolean>,
  everyMs = 20,
): Promise<number | null> {
  const start = Date.now()
  for (;;) {
    if (await check()) return Date.now() - start
    if (Date.now() - start > timeoutMs) return null
    await sleep(everyMs)
  }
}

/** Whether `check` came to hold within `timeoutMs` (polled like `eventually`). */
export async function until(timeoutMs: number, check: () => Promise<boolean>, everyMs = 20): Promise<boolean> {
  return (await eventually(timeoutMs, check, everyMs)) !== null
}

/** Resolves with `promise`'s value, or with `onTimeout` if it has not settled within `ms`. */
export async function orTimeout<T, U>(promise: Promise<T>, ms: number, onTimeout: U): Promise<T | U> {
  let timer: NodeJS.Timeout | undefined
  try {
    return await Promise.race([
      promise,
      new Promise<U>((resolve) => (timer = setTimeout(() => resolve(onTimeout), ms))),
    ])
  } finally {
    clearTimeout(timer)
  }
}

/**
 * How long this process's event loop could not run since the call: a 10 ms timer's lateness past
 * 20 ms, summed. About 0 on an idle machine; on a loaded one, time in which nothing of this
 * process (a gateway built in it included) could act, which a bound on its own delays may add.
 */
export function lostTime(): { lostMs(): number; stop(): void } {
  const TICK_MS = 10
  let lost = 0
  let last = performance.now()
  const timer = setInterval(() => {
    const now = performance.now()
    const late = now - last - TICK_MS
    if (late > 2 * TICK_MS) lost += late
    last = now
  }, TICK_MS)
  return {
    lostMs: () => Math.round(lost),
    stop: () => clearInterval(timer),
  }
}
