// A client waiting for 100 Continue with a Content-Length over the route's body limit gets its 413
// before anything is charged or sent: it never sends the body. Without Expect the body parser
// refuses it as it arrives (proxy/request-body.ts).
import { payloadTooLarge } from '../../errors.js'
import { expectsContinue } from '../../http/expect-continue.js'
import type { StepFactory } from '../options.js'
import { declaresTooMuch } from '../request-body.js'

export const declaredBodyStep: StepFactory = (route) => ({
  name: 'declared body',
  check: (request) =>
    expectsContinue(request) && declaresTooMuch(request, route.maxBodyBytes)
      ? payloadTooLarge(route.maxBodyBytes)
      : undefined,
})
