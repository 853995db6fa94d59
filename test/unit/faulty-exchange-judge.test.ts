// How the fault tests judge an answer on a loaded machine (test/helpers/faulty-exchanges.ts): the
// body idle timer's 408 passes only where a gap of the client's or a stall of the gateway's loop
// during that very exchange let it fire rightly.
import t from 'tap'
import { type ClientOutcome, judgeAnswer } from '../helpers/faulty-exchanges.js'

const IDLE_MS = 300
const idle408 = 'HTTP/1.1 408 Request Timeout\r\n\r\n{"detail":"the request body sent nothing for 300 ms"}'
const outcome = (text: string, longestGapMs = 40): ClientOutcome => ({
  status: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)![1]),
  ended: true,
  text,
  longestGapMs,
  startedAt: 10_000,
  endedAt: 11_000,
})

t.test("the combination's own answer is right, whatever the stalls", async (t) => {
  t.equal(judgeAnswer('resetsAtFirstBodyByte', 'completes', outcome('HTTP/1.1 502 Bad Gateway'), IDLE_MS, []), 'right')
  t.equal(judgeAnswer('neverAnswers', 'stallsAtOnce', outcome(idle408), IDLE_MS, []), 'right')
})

t.test('a 408 where none was due is wrong on an idle machine', async (t) => {
  t.equal(judgeAnswer('resetsAtFirstBodyByte', 'tricklesThenStalls', outcome(idle408), IDLE_MS, []), 'wrong')
  t.equal(
    judgeAnswer('neverAnswers', 'completes', outcome(idle408), IDLE_MS, [[9_000, 9_900]]),
    'wrong',
    'a stall before the exchange',
  )
  t.equal(
    judgeAnswer('neverAnswers', 'completes', outcome(idle408), IDLE_MS, [[10_500, 10_600]]),
    'wrong',
    'a stall too short',
  )
})

t.test('a 408 after a long enough gap or stall during the exchange is excused', async (t) => {
  t.equal(judgeAnswer('neverAnswers', 'completes', outcome(idle408, 270), IDLE_MS, []), 'excused', "the client's gap")
  t.equal(
    judgeAnswer('down', 'stallsAtOnce', outcome(idle408), IDLE_MS, [[10_500, 10_800]]),
    'excused',
    'a stall within',
  )
  t.equal(
    judgeAnswer('down', 'stallsAtOnce', outcome(idle408), IDLE_MS, [[9_800, 10_100]]),
    'excused',
    'overlapping its start',
  )
})

t.test("only the body idle timer's 408 is excused, and no other status", async (t) => {
  const other408 = 'HTTP/1.1 408 Request Timeout\r\n\r\n{"detail":"the request head took too long"}'
  t.equal(judgeAnswer('neverAnswers', 'completes', outcome(other408, 500), IDLE_MS, []), 'wrong')
  t.equal(
    judgeAnswer('neverAnswers', 'completes', outcome('HTTP/1.1 503 Service Unavailable', 500), IDLE_MS, []),
    'wrong',
  )
})
