{{/* Chart name, truncated. */}}
{{- define "simple-workflow.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name. */}}
{{- define "simple-workflow.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* Common labels of the manager's objects. */}}
{{- define "simple-workflow.labels" -}}
{{ include "simple-workflow.baseLabels" . }}
app.kubernetes.io/component: manager
{{- end }}

{{/* Labels every object of the release carries, without a component. */}}
{{- define "simple-workflow.baseLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "simple-workflow.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels of the manager. */}}
{{- define "simple-workflow.selectorLabels" -}}
app.kubernetes.io/name: {{ include "simple-workflow.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: manager
{{- end }}

{{/* The ServiceAccount name. */}}
{{- define "simple-workflow.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "simple-workflow.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret holding the database URL. */}}
{{- define "simple-workflow.databaseSecret" -}}
{{- if .Values.database.existingSecret }}
{{- .Values.database.existingSecret }}
{{- else }}
{{- printf "%s-database" (include "simple-workflow.fullname" .) }}
{{- end }}
{{- end }}

{{/* Egress rules of every NetworkPolicy of the release: DNS and Postgres. */}}
{{- define "simple-workflow.networkPolicy.commonEgress" -}}
# DNS.
- ports:
  - {port: 53, protocol: UDP}
  - {port: 53, protocol: TCP}
# Postgres.
- ports:
  - {port: {{ .Values.networkPolicy.databasePort }}, protocol: TCP}
  {{- with .Values.networkPolicy.databaseEgress }}
  to:
    {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/*
The WorkflowInbox whose status lists the release's namespace (the inbox its
runs live in), as JSON; "{}" when none does, or when the cluster is not asked
(helm template without --dry-run=server).
*/}}
{{- define "simple-workflow.releaseInbox" -}}
{{- $found := dict -}}
{{- /* Only where the cluster serves WorkflowInboxes: not on a first install
(no inbox can exist yet), nor under a release whose CRDs predate them. */ -}}
{{- if .Capabilities.APIVersions.Has "workflow.simpleworkflow.dev/v1alpha1/WorkflowInbox" -}}
{{- $list := lookup "workflow.simpleworkflow.dev/v1alpha1" "WorkflowInbox" "" "" -}}
{{- range $in := (dig "items" (list) $list) -}}
{{- if has $.Release.Namespace (dig "status" "namespaces" (list) $in) -}}
{{- $found = $in -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $found -}}
{{- end -}}
