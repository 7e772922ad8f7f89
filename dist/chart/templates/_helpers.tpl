{{/*
Labels every object of the chart carries beside the ones config/ gives it.
*/}}
{{- define "warmroute.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/*
image joins a repository and a tag (or digest, when the tag starts with sha256:).
*/}}
{{- define "warmroute.image" -}}
{{- if hasPrefix "sha256:" .tag -}}
{{ .repository }}@{{ .tag }}
{{- else -}}
{{ .repository }}:{{ .tag }}
{{- end -}}
{{- end }}
