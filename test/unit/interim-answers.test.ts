// What undici reads of an upstream socket while an answer's status is awaited (proxy/interim-answers.ts):
// each informational head but a 101 that begins an answer dropped, every other byte passed on in order.
import t from 'tap'
import { InterimAnswers } from '../../src/proxy/interim-answers.js'

const CONTINUE = 'HTTP/1.1 100 Continue\r\n\r\n'
const FINAL = 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok'

/** Feeds `pieces` to a watch awaiting a status, and returns what undici would read, as text. */
function read(pieces: string[], answers = awaiting()): string {
  let out = ''
  for (const piece of pieces) {
    const passed = answers.pass(Buffer.from(piece, 'latin1'))
    if (passed !== null) out += passed.toString('latin1')
  }
  return out
}

function awaiting(): InterimAnswers {
  const answers = new InterimAnswers()
  answers.awaitingStatus = true
  return answers
}

t.test('a 100 is dropped, whole or in pieces; the final answer passes', async (t) => {
  t.equal(read([CONTINUE + FINAL]), FINAL)
  t.equal(read([CONTINUE, FINAL]), FINAL)
  t.equal(read([...CONTINUE, FINAL]), FINAL, 'a byte at a time')
  t.equal(read(['HTTP/1.1 100 Continue\r\nX-A: b\r\n\r\n', FINAL]), FINAL, 'with headers')
  t.equal(read([`HTTP/1.0 100 Continue\r\n\r\n${FINAL}`]), FINAL, 'HTTP/1.0')
})

t.test('every other informational answer but a 101 is dropped too: none reaches undici', async (t) => {
  // undici starts its headers timeout again at each one it reads (the route's timeout_ms).
  const hints = 'HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n'
  const processing = 'HTTP/1.1 102 Processing\r\n\r\n'
  t.equal(read([hints + CONTINUE + FINAL]), FINAL)
  t.equal(read([hints, CONTINUE, FINAL]), FINAL)
  t.equal(read([processing + processing + hints + FINAL]), FINAL, 'in one read')
  t.equal(read([...processing, ...hints, FINAL]), FINAL, 'a byte at a time')
  t.equal(read(['HTTP/1.1 199 Whatever\r\n\r\n', FINAL]), FINAL, 'an unassigned one')
})

t.test('after a final status or a 101, bytes pass untouched', async (t) => {
  const answers = awaiting()
  t.equal(read([FINAL, CONTINUE], answers), FINAL + CONTINUE)
  t.equal(answers.awaitingStatus, false)
  const switching = 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n'
  const upgraded = awaiting()
  t.equal(read([switching, CONTINUE], upgraded), switching + CONTINUE, 'what follows a 101 is not an answer')
  t.equal(upgraded.awaitingStatus, false)
})

t.test('what is not an answer goes to undici to refuse', async (t) => {
  for (const bytes of ['SSH-2.0-OpenSSH\r\n', 'HTTP/1.1x100 Continue\r\n\r\n', 'HTTP/1.1 1x0 Continue\r\n\r\n']) {
    const answers = awaiting()
    t.equal(read([bytes], answers), bytes, JSON.stringify(bytes))
    t.equal(answers.awaitingStatus, false)
  }
  const short = awaiting()
  t.equal(read(['HTTP/1'], short), '', 'too short to tell: held')
  t.equal(read([' 200 OK'], short), 'HTTP/1 200 OK', 'then passed once it is not an answer')
})

t.test('an informational head held longer than 16 KiB ends the look, and nothing passes', async (t) => {
  // Passed on, a head just past 16 KiB could be one undici takes (it counts only the fields):
  // and from then on every 1xx would reach it. The socket's watch ends the connection instead.
  for (const status of ['100 Continue', '103 Early Hints']) {
    const long = `HTTP/1.1 ${status}\r\nX-Long: ${'a'.repeat(16 * 1024)}`
    const answers = awaiting()
    t.equal(read([long], answers), '', status)
    t.equal(answers.tooLong, true)
    t.equal(answers.awaitingStatus, false)
  }
  const whole = `HTTP/1.1 103 Early Hints\r\nX-Long: ${'a'.repeat(17 * 1024)}\r\n\r\n`
  const answers = awaiting()
  t.equal(read([whole + FINAL], answers), FINAL, 'one whole in a single read is dropped like any other')
  t.equal(answers.tooLong, false)
})

t.test('a read of nothing gives nothing, and keeps what is held', async (t) => {
  const answers = awaiting()
  t.equal(answers.pass(null), null)
  t.equal(read(['HTTP/1.1 100 Cont'], answers), '')
  t.equal(answers.pass(null), null, 'the start of a head stays held')
  t.equal(read([`inue\r\n\r\n${FINAL}`], answers), FINAL)
  const idle = new InterimAnswers()
  t.equal(read([CONTINUE], idle), CONTINUE, 'a socket not awaiting a status passes everything')
})
