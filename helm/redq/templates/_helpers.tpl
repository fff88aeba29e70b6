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
