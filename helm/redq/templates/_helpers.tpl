{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "redq.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release-chart, or the release name when it already contains the chart name. */}}
{{- define "redq.fullname" -}}
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

{{- define "redq.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every resource. */}}
{{- define "redq.labels" -}}
helm.sh/chart: {{ include "redq.chart" . }}
{{ include "redq.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels that select the pods (never change them on upgrade). */}}
{{- define "redq.selectorLabels" -}}
app.kubernetes.io/name: {{ include "redq.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "redq.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "redq.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* config.drainTimeout ("10s" or "1m") in whole seconds. */}}
{{- define "redq.drainSeconds" -}}
{{- $d := toString .Values.config.drainTimeout }}
{{- if regexMatch "^[0-9]+s$" $d }}
{{- trimSuffix "s" $d | int }}
{{- else if regexMatch "^[0-9]+m$" $d }}
{{- mul (trimSuffix "m" $d | int) 60 }}
{{- else }}
{{- fail (printf "config.drainTimeout must be whole seconds or minutes such as \"10s\" or \"1m\", not %q" $d) }}
{{- end }}
{{- end }}

{{/* terminationGracePeriodSeconds: longer than preStop sleep + drain timeout. */}}
{{- define "redq.terminationGracePeriodSeconds" -}}
{{- $floor := add (include "redq.drainSeconds" . | int) (.Values.preStopSleepSeconds | int) }}
{{- if kindIs "string" .Values.terminationGracePeriodSeconds }}
{{- add $floor 10 }}
{{- else }}
{{- $set := .Values.terminationGracePeriodSeconds | int }}
{{- if le $set $floor }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed preStopSleepSeconds + config.drainTimeout (%d)" $set $floor) }}
{{- end }}
{{- $set }}
{{- end }}
{{- end }}

{{/*
The Secrets mounted into the pod, as {"volumes": [...]}: each has a volume
name, the Secret, the directory it is mounted at, and the files redq reads
from it ({REDQ_* variable: key}). Each is mounted as a whole directory, never
with subPath: the kubelet updates a Secret volume by swapping a symlink, which
a subPath mount never sees, and redq re-reads the files every reloadInterval.
The Deployment mounts these; the ConfigMap points the REDQ_* variables at them.
*/}}
{{- define "redq.secretVolumes" -}}
{{- $v := .Values }}
{{- $vols := list }}
{{- if $v.tls.enabled }}
{{- if not $v.tls.secretName }}
{{- fail "tls.enabled needs tls.secretName: a kubernetes.io/tls Secret with tls.crt and tls.key (e.g. a cert-manager Certificate's secretName)" }}
{{- end }}
{{- $files := dict "REDQ_TLS_CERT" "tls.crt" "REDQ_TLS_KEY" "tls.key" }}
{{- if and $v.tls.clientAuth (not $v.tls.clientCaSecretName) }}
{{- $_ := set $files "REDQ_TLS_CLIENT_CA" "ca.crt" }}
{{- end }}
{{- $vols = append $vols (dict "name" "tls" "secret" $v.tls.secretName "dir" "/etc/redq/tls" "files" $files) }}
{{- if and $v.tls.clientAuth $v.tls.clientCaSecretName }}
{{- $vols = append $vols (dict "name" "tls-client-ca" "secret" $v.tls.clientCaSecretName "dir" "/etc/redq/tls-client-ca" "files" (dict "REDQ_TLS_CLIENT_CA" $v.tls.clientCaKey)) }}
{{- end }}
{{- end }}
{{- if and $v.tls.clientAuth (not $v.tls.enabled) }}
{{- fail "tls.clientAuth needs tls.enabled (client certificates are part of the gRPC port's TLS)" }}
{{- end }}
{{- if and $v.tls.clientCaSecretName (not $v.tls.clientAuth) }}
{{- fail "tls.clientCaSecretName is set but tls.clientAuth is empty: set it to \"required\" or \"optional\"" }}
{{- end }}
{{- if $v.httpTls.enabled }}
{{- if not $v.httpTls.secretName }}
{{- fail "httpTls.enabled needs httpTls.secretName: a kubernetes.io/tls Secret with tls.crt and tls.key (may be tls.secretName)" }}
{{- end }}
{{- $vols = append $vols (dict "name" "http-tls" "secret" $v.httpTls.secretName "dir" "/etc/redq/http-tls" "files" (dict "REDQ_HTTP_TLS_CERT" "tls.crt" "REDQ_HTTP_TLS_KEY" "tls.key")) }}
{{- end }}
{{- if $v.auth.tokensSecretName }}
{{- $vols = append $vols (dict "name" "auth-tokens" "secret" $v.auth.tokensSecretName "dir" "/etc/redq/auth" "files" (dict "REDQ_AUTH_TOKENS_FILE" $v.auth.tokensKey)) }}
{{- else if $v.auth.reflection }}
{{- fail "auth.reflection needs auth.tokensSecretName (without tokens every call, reflection included, is allowed)" }}
{{- end }}
{{- if $v.redis.passwordSecretName }}
{{- $vols = append $vols (dict "name" "redis-password" "secret" $v.redis.passwordSecretName "dir" "/etc/redq/redis" "files" (dict "REDQ_REDIS_PASSWORD_FILE" $v.redis.passwordKey)) }}
{{- end }}
{{- if $v.redis.caSecretName }}
{{- $vols = append $vols (dict "name" "redis-ca" "secret" $v.redis.caSecretName "dir" "/etc/redq/redis-ca" "files" (dict "REDQ_REDIS_CA_FILE" $v.redis.caKey)) }}
{{- end }}
{{- toJson (dict "volumes" $vols) }}
{{- end }}

{{/* "true" when the probes are httpGet on the HTTP port: with TLS on the gRPC
port (client certificates or not), since the kubelet's gRPC probe cannot do TLS. */}}
{{- define "redq.httpProbes" -}}
{{- if .Values.tls.enabled }}true{{ end }}
{{- end }}
