{{/*
The chart's name, truncated to 63 characters (the DNS label limit of some name fields).
*/}}
{{- define "tenancy-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
A fully qualified app name: the release name, prefixed to the chart name unless it already holds it.
*/}}
{{- define "tenancy-gateway.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "tenancy-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels every object carries, without a component.
*/}}
{{- define "tenancy-gateway.commonLabels" -}}
helm.sh/chart: {{ include "tenancy-gateway.chart" . }}
app.kubernetes.io/name: {{ include "tenancy-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ include "tenancy-gateway.imageTag" . | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels of the gateway's pods. The component is part of them so that the migration Job's
pods (component "migration") are never selected by the Service, the PDB or the HPA.
*/}}
{{- define "tenancy-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tenancy-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end }}

{{/*
Labels of the gateway's objects.
*/}}
{{- define "tenancy-gateway.labels" -}}
{{ include "tenancy-gateway.commonLabels" . }}
app.kubernetes.io/component: gateway
{{- end }}

{{/*
Labels of the migration hook's objects.
*/}}
{{- define "tenancy-gateway.migrationLabels" -}}
{{ include "tenancy-gateway.commonLabels" . }}
app.kubernetes.io/component: migration
{{- end }}

{{- define "tenancy-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tenancy-gateway.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The migration pod's service account. The chart's own ServiceAccount is an ordinary release object,
created only after the pre-install hooks have run, so the hook cannot use it on the first install:
it takes the namespace's "default" instead (the Job needs no API access; its token is not mounted).
*/}}
{{- define "tenancy-gateway.migrationServiceAccountName" -}}
{{- if .Values.migration.serviceAccountName }}
{{- .Values.migration.serviceAccountName }}
{{- else if .Values.serviceAccount.create }}
{{- "default" }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tenancy-gateway.imageTag" -}}
{{- .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
repository:tag, or repository@digest when a digest is given. Never "latest": the tag defaults to
the chart's appVersion, and "latest" fails the render saying why (the schema cannot say why).
*/}}
{{- define "tenancy-gateway.image" -}}
{{- if eq (toString .Values.image.tag) "latest" }}
{{- fail (printf "tenancy-gateway: image.tag=latest is refused: latest names whatever was pushed last, so the replicas of one release (and its migration Job) could run different builds, and a rollback would not go back to the old one; set image.tag to a release (empty: the chart's appVersion, %s) or image.digest to sha256:…" .Chart.AppVersion) }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (include "tenancy-gateway.imageTag" .) }}
{{- end }}
{{- end }}

{{/*
The Secret the gateway reads DATABASE_URL and REDIS_URL from: existingSecret, or the chart's own.
Fails the render when there is no database at all: the embedded PGlite database is one process
on one local disk, which Kubernetes cannot give a Deployment of stateless replicas.
*/}}
{{- define "tenancy-gateway.secretName" -}}
{{- if .Values.existingSecret }}
{{- .Values.existingSecret }}
{{- else if .Values.database.url }}
{{- include "tenancy-gateway.fullname" . }}
{{- else }}
{{- fail "tenancy-gateway: set database.url (postgres://…) or existingSecret (a Secret holding DATABASE_URL): the embedded database is not for Kubernetes" }}
{{- end }}
{{- end }}

{{- define "tenancy-gateway.databaseUrlKey" -}}
{{- if .Values.existingSecret }}{{ .Values.existingSecretKeys.databaseUrl }}{{ else }}DATABASE_URL{{ end }}
{{- end }}

{{- define "tenancy-gateway.redisUrlKey" -}}
{{- if .Values.existingSecret }}{{ .Values.existingSecretKeys.redisUrl }}{{ else }}REDIS_URL{{ end }}
{{- end }}

{{- define "tenancy-gateway.requestLogDatabaseUrlKey" -}}
{{- if .Values.existingSecret }}{{ .Values.existingSecretKeys.requestLogDatabaseUrl }}{{ else }}REQUEST_LOG_DATABASE_URL{{ end }}
{{- end }}

{{- define "tenancy-gateway.encryptionKeyKey" -}}
{{- if .Values.existingSecret }}{{ .Values.existingSecretKeys.encryptionKey }}{{ else }}ENCRYPTION_KEY{{ end }}
{{- end }}

{{/*
The Secret of the release as the cluster holds it now (an empty map on a first install, and when
rendering without a cluster). .ci/helm-check replaces this lookup to render the upgrade path.
*/}}
{{- define "tenancy-gateway.installedSecret" -}}
{{- toJson (lookup "v1" "Secret" .Release.Namespace (include "tenancy-gateway.fullname" .)) }}
{{- end }}

{{/*
ENCRYPTION_KEY of the chart's own Secret, as Secret data (base64 of the base64 key): the one the
release's Secret holds already, so that an upgrade keeps it (a new one would leave the signing keys
in Postgres unreadable), else 32 random bytes. Made once per render and shared by every template
that asks (the Secret, its copy for the migration hook, the checksum of the pod template).
*/}}
{{- define "tenancy-gateway.encryptionKeyData" -}}
{{- if not (hasKey .Values "generatedEncryptionKeyData") }}
{{- $installed := include "tenancy-gateway.installedSecret" . | fromJson }}
{{- $data := index (get $installed "data" | default dict) "ENCRYPTION_KEY" | default (randBytes 32 | b64enc) }}
{{- $_ := set .Values "generatedEncryptionKeyData" $data }}
{{- end }}
{{- get .Values "generatedEncryptionKeyData" }}
{{- end }}

{{/*
Whether more than one gateway pod may run at once.
*/}}
{{- define "tenancy-gateway.multiReplica" -}}
{{- if .Values.autoscaling.enabled }}
{{- if gt (int .Values.autoscaling.maxReplicas) 1 }}true{{ end }}
{{- else if gt (int .Values.replicaCount) 1 }}true{{ end }}
{{- end }}

{{/*
Where the route table is mounted, and the file GATEWAY_CONFIG names.
*/}}
{{- define "tenancy-gateway.configDir" -}}/etc/tenancy-gateway{{- end }}
{{- define "tenancy-gateway.configFile" -}}gateway.yaml{{- end }}

{{/*
The route table (GATEWAY_CONFIG) as YAML: top-level defaults when set, then the routes as given.
toYaml keeps whole numbers whole (10485760, not 1.048576e+07).
*/}}
{{- define "tenancy-gateway.routeTable" -}}
{{- $doc := dict "routes" (.Values.routes | default list) }}
{{- if not (kindIs "invalid" .Values.gateway.timeoutMs) }}
{{- $_ := set $doc "timeout_ms" .Values.gateway.timeoutMs }}
{{- end }}
{{- if not (kindIs "invalid" .Values.gateway.maxBodyBytes) }}
{{- $_ := set $doc "max_body_bytes" .Values.gateway.maxBodyBytes }}
{{- end }}
{{- toYaml $doc }}
{{- end }}
