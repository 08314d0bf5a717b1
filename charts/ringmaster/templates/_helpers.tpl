{{/* Names and labels, as `helm create` makes them. */}}
{{- define "ringmaster.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ringmaster.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "ringmaster.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ringmaster.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "ringmaster.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "ringmaster.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ringmaster
{{- end }}

{{- define "ringmaster.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ringmaster.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository@digest when a digest is given (it wins over the tag), else repository:tag. */}}
{{- define "ringmaster.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Several replicas: kopf peering keeps one active. "true" or "". */}}
{{- define "ringmaster.peering" -}}
{{- if gt (int .Values.replicaCount) 1 }}true{{ end }}
{{- end }}

{{- define "ringmaster.peeringName" -}}
{{- default (include "ringmaster.fullname" .) .Values.peering.name }}
{{- end }}

{{- /* The hardware catalog ConfigMap the operator reads (and re-reads) by name: always one. */}}
{{- define "ringmaster.catalogConfigMap" -}}
{{- if .Values.catalog.existingConfigMap }}
{{- .Values.catalog.existingConfigMap }}
{{- else }}
{{- printf "%s-catalog" (include "ringmaster.fullname" .) }}
{{- end }}
{{- end }}

{{- define "ringmaster.calibrationConfigMap" -}}
{{- printf "%s-calibration" (include "ringmaster.fullname" .) }}
{{- end }}
