// The proxy's checks as an ordered list of steps (docs/lifecycle.md, the steps), run
// by one onRequest hook. A step decides at once when it can, so a request admitted from memory
// passes every step without a promise; a step that must wait returns one. A step that takes
// something (a limit's units, a slot) says how to give it back: when a later step refuses the
// request, or its client leaves, the steps already passed are undone, last first.
import type { FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify'

/** The request's client left while a step waited: nothing is answered, what was taken goes back. */
export const ABANDONED = Symbol('abandoned')

/** The step sent the request's answer itself (a CORS preflight's 204): the later steps and the upstream are skipped. */
export const ANSWERED = Symbol('answered')

/** undefined: go on. An Error: refuse with it. ABANDONED: stop without an answer. ANSWERED: stop, answered. */
export type Verdict = undefined | Error | typeof ABANDONED | typeof ANSWERED

export interface ProxyStep {
  /** Names the step in the per-step cost table (bench/README.md) and in docs/lifecycle.md. */
  readonly name: string
  /** Decides at once, or returns a promise of its verdict. Must not throw for a client's input. */
  check(request: FastifyRequest, reply: FastifyReply): Verdict | Promise<Verdict>
  /** Gives back what `check` took, when a later step refuses the request or its client leaves. */
  undo?(request: FastifyRequest): void
}

type Done = (error?: Error) => void

/** The onRequest hook that runs `steps` in order. */
export function runSteps(steps: readonly ProxyStep[]): onRequestHookHandler {
  /** Undoes steps [0, passed) last first, then answers `verdict` (nothing for ABANDONED or ANSWERED). */
  function stop(
    passed: number,
    request: FastifyRequest,
    verdict: Error | typeof ABANDONED | typeof ANSWERED,
    done: Done,
  ): void {
    for (let i = passed - 1; i >= 0; i--) steps[i]!.undo?.(request)
    // An answered request's hook never calls done: fastify's way to answer from onRequest.
    if (verdict instanceof Error) done(verdict)
  }

  function runFrom(first: number, request: FastifyRequest, reply: FastifyReply, done: Done): void {
    for (let i = first; i < steps.length; i++) {
      let verdict: Verdict | Promise<Verdict>
      try {
        verdict = steps[i]!.check(request, reply)
      } catch (error) {
        // A bug, not a refusal: the request's 500, and what the steps before took goes back.
        stop(i, request, error as Error, done)
        return
      }
      if (verdict === undefined) continue
      if (verdict === ABANDONED || verdict === ANSWERED || verdict instanceof Error) {
        stop(i, request, verdict, done)
        return
      }
      verdict.then(
        (later) => {
          if (later !== undefined) {
            stop(i, request, later, done)
            return
          }
          runFrom(i + 1, request, reply, done)
        },
        (error: Error) => stop(i, request, error, done),
      )
      return
    }
    done()
  }

  return function proxyChecks(request, reply, done) {
    runFrom(0, request, reply, done)
  }
}
