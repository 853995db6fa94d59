// RFC 9110 §10.1.1: a client that sent `Expect: 100-continue` sends its body once told to, and only
// once every check has passed and the request holds its slot. The upstream never sees Expect.
import { expectsContinue } from '../../http/expect-continue.js'
import type { StepFactory } from '../options.js'

export const sendContinueStep: StepFactory = () => ({
  name: 'send 100 Continue',
  check(request, reply) {
    if (expectsContinue(request)) reply.raw.writeContinue()
    return undefined
  },
})
