// nginx and Caddy (Debian's /usr/sbin/nginx with its headers-more module, and /usr/bin/caddy) in
// front of an upstream, asking a gateway's AUTHZ_PORT, run from the configurations
// docs/forward-auth.md shows (docs/examples/forward-auth/), with only their addresses replaced.
// Each runs in the foreground as a child of the test, on a free port, in a temporary directory of
// its own; stopped at teardown, and by a watchdog should the test process die first.
import { type ChildProcess, spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { connect } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { sleep } from './poll.js'
import { stablePort } from './ports.js'
import type { TestLike } from './test-like.js'

const EXAMPLES = join(import.meta.dirname, '..', '..', 'docs', 'examples', 'forward-auth')

export interface FrontProxy {
  url: string
  /** What the proxy wrote to stderr (its error log), for a failing assertion's message. */
  log(): string
}

/** host:port of a URL (http://127.0.0.1:1234 → 127.0.0.1:1234). */
const hostPort = (url: string) => new URL(url).host

function watchOver(pid: number): void {
  const script = `while kill -0 ${process.pid} 2>/dev/null && kill -0 ${pid} 2>/dev/null; do sleep 0.5; done; kill -0 ${process.pid} 2>/dev/null || kill -9 ${pid} 2>/dev/null; exit 0`
  spawn('/bin/sh', ['-c', script], { stdio: 'ignore', detached: true }).unref()
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1')
    socket.once('connect', () => {
      socket.destroy()
      resolve(true)
    })
    socket.once('error', () => resolve(false))
  })
}

async function run(
  t: TestLike,
  command: string,
  args: string[],
  port: number,
  env: NodeJS.ProcessEnv = process.env,
): Promise<FrontProxy> {
  let stderr = ''
  const child: ChildProcess = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], env })
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
  watchOver(child.pid!)
  let exited = false
  const gone = new Promise<void>((resolve) =>
    child.once('exit', () => {
      exited = true
      resolve()
    }),
  )
  t.teardown(async () => {
    if (!exited) child.kill('SIGTERM')
    await gone
  })
  const deadline = Date.now() + 20_000
  while (!(await accepts(port))) {
    if (exited) throw new Error(`${command} exited at start: ${stderr.trim()}`)
    if (Date.now() > deadline) throw new Error(`${command} did not listen on ${port} within 20 s: ${stderr.trim()}`)
    await sleep(50)
  }
  return { url: `http://127.0.0.1:${port}`, log: () => stderr }
}

/**
 * docs/examples/forward-auth/nginx.conf in a main configuration of the test's own, which loads
 * headers-more (Debian's libnginx-mod-http-headers-more-filter) as Debian's own nginx.conf does.
 */
export async function startNginx(t: TestLike, authzUrl: string, upstreamUrl: string): Promise<FrontProxy> {
  const dir = mkdtempSync(join(tmpdir(), 'tgw-nginx-'))
  const port = await stablePort()
  const site = readFileSync(join(EXAMPLES, 'nginx.conf'), 'utf8')
    .replace('server gateway:8081;', `server ${hostPort(authzUrl)};`)
    .replace('server app:8080;', `server ${hostPort(upstreamUrl)};`)
    .replace('listen 80;', `listen 127.0.0.1:${port};`)
  writeFileSync(join(dir, 'site.conf'), site)
  writeFileSync(
    join(dir, 'nginx.conf'),
    `daemon off;
load_module /usr/lib/nginx/modules/ngx_http_headers_more_filter_module.so;
worker_processes 1;
pid ${dir}/nginx.pid;
error_log stderr warn;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path ${dir}/body;
    proxy_temp_path ${dir}/proxy;
    fastcgi_temp_path ${dir}/fastcgi;
    uwsgi_temp_path ${dir}/uwsgi;
    scgi_temp_path ${dir}/scgi;
    include ${dir}/site.conf;
}
`,
  )
  return run(t, '/usr/sbin/nginx', ['-e', 'stderr', '-p', dir, '-c', join(dir, 'nginx.conf')], port)
}

/** docs/examples/forward-auth/Caddyfile, its addresses the test's. */
export async function startCaddy(t: TestLike, authzUrl: string, upstreamUrl: string): Promise<FrontProxy> {
  const dir = mkdtempSync(join(tmpdir(), 'tgw-caddy-'))
  const port = await stablePort()
  const caddyfile = readFileSync(join(EXAMPLES, 'Caddyfile'), 'utf8')
    .replaceAll('gateway:8081', hostPort(authzUrl))
    .replaceAll('app:8080', hostPort(upstreamUrl))
    .replace(':80 {', `http://127.0.0.1:${port} {`)
  writeFileSync(join(dir, 'Caddyfile'), caddyfile)
  // Caddy keeps its state under HOME and XDG_*: the test's directory, never the user's.
  const env = { ...process.env, HOME: dir, XDG_DATA_HOME: dir, XDG_CONFIG_HOME: dir }
  return run(t, '/usr/bin/caddy', ['run', '--adapter', 'caddyfile', '--config', join(dir, 'Caddyfile')], port, env)
}
