// Validates the output of `helm template` for .ci/helm-check:
//   1. every object against the Kubernetes OpenAPI schemas (kubernetes-models; ServiceMonitor
//      against the Prometheus Operator's CRD schema), an unknown apiVersion/kind being an error;
//   2. the chart's contract (docs/operations.md): hardened pods, probes, hook
//      order, selectors that match, no `latest` image, HPA autoscaling/v2, …;
//   3. with --app, the rendered route table and environment through the gateway's own
//      loadConfig and loadRouteTable (run under `node --import tsx` from the repository root).
//
// usage: node [--import tsx] .ci/validate-k8s.mjs --modules <npm prefix> --label <name>
//          [--kinds Kind=n,…] [--app <repository root>] <rendered.yaml>
//
// The validators are not in package.json: helm-check installs them into a temporary npm prefix,
// and this script resolves them from there with createRequire (NODE_PATH does not apply to ESM
// imports, and all three packages ship CommonJS builds).
//
// Note: kubernetes-models' schemas check types, required fields and enums but do not refuse
// unknown fields (the OpenAPI schemas lack additionalProperties: false); the contract checks
// below read the fields that matter by their exact names, so a misspelt one fails there.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { parseArgs } from 'node:util'
import { pathToFileURL } from 'node:url'

const { values: args, positionals } = parseArgs({
  options: {
    modules: { type: 'string' },
    label: { type: 'string', default: 'render' },
    kinds: { type: 'string' },
    app: { type: 'string' },
  },
  allowPositionals: true,
})
if (!args.modules || positionals.length !== 1) {
  console.error(
    'usage: validate-k8s.mjs --modules <npm prefix> --label <name> [--kinds Kind=n,…] [--app <root>] <rendered.yaml>',
  )
  process.exit(2)
}

const requireTool = createRequire(join(resolve(args.modules), 'noop.cjs'))
const YAML = requireTool('yaml')
const label = args.label
const failures = []
const fail = (where, problem) => failures.push(`${label}: ${where}: ${problem}`)
const counts = {}

// ---- 1. parse and validate against the schemas -------------------------------------------

const text = readFileSync(positionals[0], 'utf8')
const objects = []
for (const doc of YAML.parseAllDocuments(text)) {
  for (const err of [...doc.errors, ...doc.warnings]) fail('YAML', err.message)
  const value = doc.toJS()
  if (value === null || value === undefined) continue // a template that rendered nothing
  objects.push(value)
}
if (failures.length > 0) report()

// Custom resources whose schemas come from another package than kubernetes-models.
const CRD_PACKAGES = { 'monitoring.coreos.com/v1': '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1' }

function modelFor(apiVersion, kind) {
  if (
    typeof apiVersion !== 'string' ||
    typeof kind !== 'string' ||
    !/^[A-Za-z0-9.]+(\/v[0-9a-z]+)?$/.test(apiVersion)
  ) {
    return undefined
  }
  const specifier = CRD_PACKAGES[apiVersion] ?? `kubernetes-models/${apiVersion}`
  let group
  try {
    group = requireTool(specifier)
  } catch (err) {
    if (err.code === 'MODULE_NOT_FOUND' || err.code === 'ERR_PACKAGE_PATH_NOT_EXPORTED') return undefined
    throw err
  }
  const Model = group[kind]
  // A group module also exports the nested types (DeploymentSpec, …): only top-level kinds.
  return typeof Model === 'function' && Model.kind === kind && Model.apiVersion === apiVersion ? Model : undefined
}

const name = (o) => `${o?.kind ?? '?'}/${o?.metadata?.name ?? '?'}`
for (const o of objects) {
  counts[o.kind] = (counts[o.kind] ?? 0) + 1
  const Model = modelFor(o.apiVersion, o.kind)
  if (Model === undefined) {
    fail(name(o), `unknown apiVersion/kind ${o.apiVersion} ${o.kind}: no schema to validate it against`)
    continue
  }
  try {
    new Model(o).validate()
  } catch (err) {
    fail(name(o), `invalid ${o.apiVersion} ${o.kind}: ${err.message}`)
  }
  if (!o.metadata?.name) fail(name(o), 'metadata.name is missing')
  for (const key of ['app.kubernetes.io/name', 'app.kubernetes.io/instance', 'app.kubernetes.io/managed-by']) {
    if (!o.metadata?.labels?.[key]) fail(name(o), `label ${key} is missing`)
  }
}

if (args.kinds !== undefined) {
  const expected = Object.fromEntries(
    args.kinds
      .split(',')
      .filter(Boolean)
      .map((pair) => {
        const [kind, n] = pair.split('=')
        return [kind, Number(n ?? 1)]
      }),
  )
  const show = (c) =>
    Object.keys(c)
      .sort()
      .map((k) => `${k}=${c[k]}`)
      .join(',')
  if (show(expected) !== show(counts)) fail('objects', `expected ${show(expected)}, rendered ${show(counts)}`)
}

// ---- 2. the chart's contract ---------------------------------------------------------------

const ofKind = (kind) => objects.filter((o) => o.kind === kind)
const byName = (kind, n) => objects.find((o) => o.kind === kind && o.metadata?.name === n)
const sameLabels = (a, b) =>
  JSON.stringify(Object.entries(a ?? {}).sort()) === JSON.stringify(Object.entries(b ?? {}).sort())
const isSubset = (small, big) => Object.entries(small ?? {}).every(([k, v]) => big?.[k] === v)
const hookEvents = (o) =>
  (o.metadata?.annotations?.['helm.sh/hook'] ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
const hookWeight = (o) => Number(o.metadata?.annotations?.['helm.sh/hook-weight'] ?? 0)

/** Checks shared by every pod the chart runs (the gateway's and the migration's). */
function checkPod(owner, podSpec) {
  const where = name(owner)
  const pod = podSpec.securityContext ?? {}
  if (podSpec.automountServiceAccountToken !== false) fail(where, 'automountServiceAccountToken must be false')
  const volumes = new Map((podSpec.volumes ?? []).map((v) => [v.name, v]))
  for (const c of podSpec.containers ?? []) {
    const at = `${where} container ${c.name}`
    const sc = c.securityContext ?? {}
    const effective = (key) => sc[key] ?? pod[key]
    if (effective('runAsNonRoot') !== true) fail(at, 'runAsNonRoot must be true')
    if (!(effective('runAsUser') > 0)) fail(at, 'runAsUser must be a non-zero uid')
    if (sc.readOnlyRootFilesystem !== true) fail(at, 'readOnlyRootFilesystem must be true')
    if (sc.allowPrivilegeEscalation !== false) fail(at, 'allowPrivilegeEscalation must be false')
    if (sc.privileged === true) fail(at, 'must not be privileged')
    if (!(sc.capabilities?.drop ?? []).includes('ALL')) fail(at, 'capabilities must drop ALL')
    if (effective('seccompProfile')?.type !== 'RuntimeDefault') fail(at, 'seccompProfile must be RuntimeDefault')
    const image = String(c.image ?? '')
    const lastPart = image.split('/').pop()
    if (!image.includes('@sha256:') && !lastPart.includes(':'))
      fail(at, `image ${image} has no tag (would mean latest)`)
    if (/:latest(@|$)/.test(image)) fail(at, `image ${image} uses latest`)
    for (const kind of ['requests', 'limits']) {
      for (const resource of ['cpu', 'memory']) {
        if (c.resources?.[kind]?.[resource] === undefined) fail(at, `resources.${kind}.${resource} is missing`)
      }
    }
    const tmp = (c.volumeMounts ?? []).find((m) => m.mountPath === '/tmp')
    if (tmp === undefined || volumes.get(tmp.name)?.emptyDir === undefined)
      fail(at, 'needs an emptyDir at /tmp (read-only root)')
  }
}

/** A Kubernetes memory quantity in MiB, or null when it is not one this check reads. */
function mebibytes(quantity) {
  const match = /^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$/.exec(String(quantity ?? ''))
  if (!match) return null
  const factor = {
    Ki: 1 / 1024,
    Mi: 1,
    Gi: 1024,
    Ti: 1024 ** 2,
    k: 1e3 / 1024 ** 2,
    M: 1e6 / 1024 ** 2,
    G: 1e9 / 1024 ** 2,
    T: 1e12 / 1024 ** 2,
  }
  return Number(match[1]) * (match[2] ? factor[match[2]] : 1 / 1024 ** 2)
}

/** The Secret named by a secretKeyRef, when the chart renders it (else it is an existing one). */
function secretRefs(container) {
  return (container.env ?? [])
    .filter((e) => e.valueFrom?.secretKeyRef)
    .map((e) => ({ env: e.name, ...e.valueFrom.secretKeyRef }))
}

const deployments = ofKind('Deployment')
if (deployments.length !== 1) fail('Deployment', `expected exactly one, found ${deployments.length}`)
const deploy = deployments[0]
if (deploy) {
  const where = name(deploy)
  const spec = deploy.spec ?? {}
  const podSpec = spec.template?.spec ?? {}
  const selector = spec.selector?.matchLabels
  checkPod(deploy, podSpec)
  if (!isSubset(selector, spec.template?.metadata?.labels)) fail(where, 'pod labels do not carry the selector labels')
  if (!spec.template?.metadata?.annotations?.['checksum/config'])
    fail(where, 'pod template lacks the checksum/config annotation')
  if (!(podSpec.terminationGracePeriodSeconds > 0)) fail(where, 'terminationGracePeriodSeconds is not set')
  const gateway = (podSpec.containers ?? [])[0] ?? {}
  const ports = new Map((gateway.ports ?? []).map((p) => [p.name, p.containerPort]))
  for (const port of ['http', 'metrics']) if (!ports.has(port)) fail(where, `container port ${port} is missing`)
  const probe = (kind, path) => {
    const p = gateway[kind]
    // The metrics port: clients holding every public connection (MAX_CONNECTIONS) cannot fail it.
    if (p?.httpGet?.path !== path || p.httpGet.port !== 'metrics')
      fail(where, `${kind} must GET ${path} on port metrics`)
  }
  probe('livenessProbe', '/healthz')
  probe('readinessProbe', '/readyz')
  const env = new Map((gateway.env ?? []).map((e) => [e.name, e]))
  for (const v of ['LOG_LEVEL', 'GATEWAY_CONFIG', 'DATABASE_URL', 'PORT', 'METRICS_PORT']) {
    if (!env.has(v)) fail(where, `env ${v} is missing`)
  }
  if (env.get('PORT')?.value !== String(ports.get('http'))) fail(where, 'env PORT differs from the http container port')
  if (env.get('METRICS_PORT')?.value !== String(ports.get('metrics')))
    fail(where, 'env METRICS_PORT differs from the metrics container port')
  if (env.get('REDIS_URL') && env.get('REDIS_URL').valueFrom?.secretKeyRef?.optional !== true)
    fail(where, 'env REDIS_URL must be optional')
  // With DATABASE_URL the gateway refuses to start without it (docs/credentials.md, Signing keys).
  const encryptionKey = env.get('ENCRYPTION_KEY')?.valueFrom?.secretKeyRef
  if (!encryptionKey) fail(where, 'env ENCRYPTION_KEY must come from a Secret')
  else if (encryptionKey.optional === true) fail(where, 'env ENCRYPTION_KEY must not be optional')
  // Kubernetes kills the pod after the grace period: the drain must fit in it.
  const drainMs =
    Number(env.get('SHUTDOWN_DELAY_MS')?.value ?? 0) + Number(env.get('SHUTDOWN_TIMEOUT_MS')?.value ?? 10000)
  if (!(podSpec.terminationGracePeriodSeconds * 1000 > drainMs)) {
    fail(
      where,
      `terminationGracePeriodSeconds ${podSpec.terminationGracePeriodSeconds} s does not cover the drain (${drainMs} ms)`,
    )
  }

  // A heap cap near the memory limit gets the pod OOM-killed before V8 collects: RSS beyond the
  // heap (code, buffers, sockets) measured ~80 MB over a 160 MiB cap (bench/RESULTS.md at e5da086).
  const heapCap = /--max-old-space-size=(\d+)/.exec(env.get('NODE_OPTIONS')?.value ?? '')
  const memoryLimit = mebibytes(gateway.resources?.limits?.memory)
  if (heapCap && memoryLimit !== null && memoryLimit - Number(heapCap[1]) < 128) {
    fail(
      where,
      `--max-old-space-size=${heapCap[1]} leaves too little of the ${gateway.resources.limits.memory} memory limit (want 128 MiB beyond the heap cap)`,
    )
  }
  const envNames = (gateway.env ?? []).map((e) => e.name)
  for (const dup of new Set(envNames.filter((n, i) => envNames.indexOf(n) !== i)))
    fail(where, `env ${dup} is set twice (extraEnv repeats a variable the chart sets?)`)

  // GATEWAY_CONFIG must name a file of the rendered ConfigMap, mounted where it points.
  const configPath = env.get('GATEWAY_CONFIG')?.value ?? ''
  const mount = (gateway.volumeMounts ?? []).find((m) => configPath.startsWith(`${m.mountPath}/`))
  const volume = (podSpec.volumes ?? []).find((v) => v.name === mount?.name)
  const configMap = volume?.configMap ? byName('ConfigMap', volume.configMap.name) : undefined
  const file = mount ? configPath.slice(mount.mountPath.length + 1) : undefined
  if (configMap?.data?.[file] === undefined) {
    fail(where, `GATEWAY_CONFIG ${configPath} is not a key of a rendered ConfigMap mounted there`)
  } else {
    const table = YAML.parse(configMap.data[file])
    if (table === null || typeof table !== 'object' || !Array.isArray(table.routes))
      fail(name(configMap), `${file} has no routes list`)
  }

  // The gateway's Secret, when rendered, must belong to the release (not be a hook).
  for (const ref of secretRefs(gateway)) {
    const secret = byName('Secret', ref.name)
    if (secret && hookEvents(secret).length > 0) fail(where, `Secret ${ref.name} is a hook: it would leave the release`)
    if (secret && secret.data?.[ref.key] === undefined && ref.optional !== true)
      fail(where, `Secret ${ref.name} has no key ${ref.key}`)
  }

  // Topology spread on the chart's own selector labels.
  for (const t of podSpec.topologySpreadConstraints ?? []) {
    if (!sameLabels(t.labelSelector?.matchLabels, selector))
      fail(where, `topologySpreadConstraints (${t.topologyKey}) do not select the gateway's pods`)
  }

  // The HPA owns the replica count when there is one.
  const hpas = ofKind('HorizontalPodAutoscaler')
  for (const hpa of hpas) {
    if (hpa.apiVersion !== 'autoscaling/v2') fail(name(hpa), `must be autoscaling/v2, is ${hpa.apiVersion}`)
    const target = hpa.spec?.scaleTargetRef
    if (target?.kind !== 'Deployment' || target?.name !== deploy.metadata.name)
      fail(name(hpa), 'does not target the Deployment')
  }
  if (hpas.length > 0 && spec.replicas !== undefined) fail(where, 'sets replicas although an HPA scales it')
  if (hpas.length === 0 && spec.replicas === undefined) fail(where, 'has neither replicas nor an HPA')

  for (const svc of ofKind('Service')) {
    if ((svc.spec?.type ?? 'ClusterIP') !== 'ClusterIP')
      fail(name(svc), 'must be ClusterIP (it carries the metrics port)')
    if (!sameLabels(svc.spec?.selector, selector)) fail(name(svc), 'selector differs from the Deployment selector')
    const names = (svc.spec?.ports ?? []).map((p) => p.name)
    for (const port of ['http', 'metrics']) if (!names.includes(port)) fail(name(svc), `port ${port} is missing`)
    for (const p of svc.spec?.ports ?? []) {
      if (typeof p.targetPort === 'string' && !ports.has(p.targetPort))
        fail(name(svc), `targetPort ${p.targetPort} is no container port`)
    }
  }
  for (const pdb of ofKind('PodDisruptionBudget')) {
    if (!sameLabels(pdb.spec?.selector?.matchLabels, selector))
      fail(name(pdb), 'selector differs from the Deployment selector')
  }
  for (const sm of ofKind('ServiceMonitor')) {
    const endpoints = sm.spec?.endpoints ?? []
    if (!endpoints.some((e) => e.port === 'metrics' && e.path === '/metrics'))
      fail(name(sm), 'must scrape port metrics, path /metrics')
    if (!ofKind('Service').some((s) => isSubset(sm.spec?.selector?.matchLabels, s.metadata?.labels)))
      fail(name(sm), 'selects no rendered Service')
  }
  for (const ing of ofKind('Ingress')) {
    for (const rule of ing.spec?.rules ?? []) {
      for (const p of rule.http?.paths ?? []) {
        const port = p.backend?.service?.port
        const httpPort = byName('Service', p.backend?.service?.name)?.spec?.ports?.find((x) => x.name === 'http')?.port
        if (port?.name !== 'http' && (port?.number === undefined || port.number !== httpPort)) {
          fail(name(ing), 'must route to the http port of the Service only (metrics stay internal)')
        }
      }
    }
  }
  const saName = podSpec.serviceAccountName
  const sa = saName ? byName('ServiceAccount', saName) : undefined
  if (sa && sa.automountServiceAccountToken !== false) fail(name(sa), 'automountServiceAccountToken must be false')
}

// Every Job is the migration hook: before any pod of the release, reading Secrets that exist by then.
for (const job of ofKind('Job')) {
  const where = name(job)
  const events = hookEvents(job)
  for (const e of ['pre-install', 'pre-upgrade']) if (!events.includes(e)) fail(where, `helm.sh/hook lacks ${e}`)
  const policies = job.metadata?.annotations?.['helm.sh/hook-delete-policy'] ?? ''
  if (!policies.includes('before-hook-creation')) fail(where, 'hook-delete-policy lacks before-hook-creation')
  if (!(job.spec?.backoffLimit <= 3)) fail(where, 'backoffLimit must be small (≤ 3)')
  const podSpec = job.spec?.template?.spec ?? {}
  checkPod(job, podSpec)
  if (podSpec.restartPolicy !== 'Never') fail(where, 'restartPolicy must be Never')
  const container = (podSpec.containers ?? [])[0] ?? {}
  if ((container.command ?? []).join(' ') !== 'node dist/cli.js migrate')
    fail(where, `command must be node dist/cli.js migrate, is ${JSON.stringify(container.command)}`)
  if (deploy && container.image !== deploy.spec?.template?.spec?.containers?.[0]?.image)
    fail(where, 'image differs from the gateway image')
  if (deploy && isSubset(deploy.spec?.selector?.matchLabels, job.spec?.template?.metadata?.labels))
    fail(where, 'pods carry the gateway selector labels (the Service would route to them)')
  const refs = secretRefs(container)
  if (!refs.some((r) => r.env === 'DATABASE_URL')) fail(where, 'env DATABASE_URL must come from a Secret')
  // Every CLI command, migrate included, refuses to start without it; and it must be the gateway's.
  const jobKey = refs.find((r) => r.env === 'ENCRYPTION_KEY' && r.optional !== true)
  if (!jobKey) fail(where, 'env ENCRYPTION_KEY must come from a Secret, not optional')
  const gatewayKey =
    deploy && secretRefs(deploy.spec?.template?.spec?.containers?.[0] ?? {}).find((r) => r.env === 'ENCRYPTION_KEY')
  const secretValue = (ref) => (ref ? byName('Secret', ref.name)?.data?.[ref.key] : undefined)
  if (jobKey && gatewayKey) {
    const [own, gateway] = [secretValue(jobKey), secretValue(gatewayKey)]
    const sameExisting =
      !byName('Secret', jobKey.name) && jobKey.name === gatewayKey.name && jobKey.key === gatewayKey.key
    if (own === undefined && gateway === undefined ? !sameExisting : own !== gateway)
      fail(where, "env ENCRYPTION_KEY is not the gateway's")
  }
  for (const ref of refs) {
    const secret = byName('Secret', ref.name)
    if (secret === undefined) continue // existingSecret: created before the release
    const secretEvents = hookEvents(secret)
    if (!events.every((e) => secretEvents.includes(e)) || !(hookWeight(secret) < hookWeight(job))) {
      fail(
        where,
        `reads Secret ${ref.name}, which is not a hook of the same events with a lower weight (it would not exist yet)`,
      )
    }
    if (secret.data?.[ref.key] === undefined) fail(where, `Secret ${ref.name} has no key ${ref.key}`)
  }
  // Hooks run before ordinary objects exist: a ServiceAccount the chart creates is not there yet.
  const sa = podSpec.serviceAccountName
  if (sa && byName('ServiceAccount', sa) && hookEvents(byName('ServiceAccount', sa)).length === 0) {
    fail(where, `runs as ServiceAccount ${sa}, which the release creates only after its pre-install hooks`)
  }
}

// ---- 3. the gateway's own configuration parser ---------------------------------------------

if (args.app && deploy && failures.length === 0) await checkWithGateway(resolve(args.app))

async function checkWithGateway(root) {
  let config, routes
  try {
    config = await import(pathToFileURL(join(root, 'src/config.ts')).href)
    routes = await import(pathToFileURL(join(root, 'src/proxy/route-table.ts')).href)
  } catch (err) {
    fail('--app', `cannot import the gateway's config modules (run under node --import tsx): ${err.message}`)
    return
  }
  const container = deploy.spec.template.spec.containers[0]
  const env = {}
  for (const e of container.env ?? []) {
    if (e.value !== undefined) env[e.name] = e.value
    const ref = e.valueFrom?.secretKeyRef
    const data = ref ? byName('Secret', ref.name)?.data?.[ref.key] : undefined
    if (data !== undefined) env[e.name] = Buffer.from(data, 'base64').toString('utf8')
  }
  // The mounted file, written where the gateway can read it.
  const mount = container.volumeMounts.find((m) => env.GATEWAY_CONFIG?.startsWith(`${m.mountPath}/`))
  const volume = deploy.spec.template.spec.volumes.find((v) => v.name === mount.name)
  const configMap = byName('ConfigMap', volume.configMap.name)
  const dir = mkdtempSync(join(tmpdir(), 'helm-check-config-'))
  try {
    const file = join(dir, 'gateway.yaml')
    writeFileSync(file, configMap.data[env.GATEWAY_CONFIG.slice(mount.mountPath.length + 1)])
    const loaded = config.loadConfig({ ...env, GATEWAY_CONFIG: file }, dir)
    const table = routes.loadRouteTable(loaded.gatewayConfig, loaded.upstreamUrl)
    console.log(`${label}: the gateway accepts the rendered configuration (${table.length} route(s))`)
  } catch (err) {
    fail(name(deploy), `the gateway would refuse its configuration: ${err.message}`)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

report()

function report() {
  if (failures.length > 0) {
    for (const f of failures) console.error(`FAIL ${f}`)
    process.exit(1)
  }
  const summary = Object.keys(counts)
    .sort()
    .map((k) => `${k} ${counts[k]}`)
    .join(', ')
  console.log(`${label}: ${objects.length} objects valid (${summary})`)
  process.exit(0)
}
