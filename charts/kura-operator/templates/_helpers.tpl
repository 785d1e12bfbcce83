{{/* Chart name, overridable. */}}
{{- define "kura-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of every namespaced object: the release name, prefixed unless it already names the chart. */}}
{{- define "kura-operator.fullname" -}}
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

{{/*
Name of cluster-scoped objects (ClusterRoles, ClusterRoleBindings): the same
release name may exist in several namespaces, so the namespace is part of it.
*/}}
{{- define "kura-operator.clusterName" -}}
{{- printf "%s-%s" .Release.Namespace (include "kura-operator.fullname" .) }}
{{- end }}

{{- define "kura-operator.serviceAccountName" -}}
{{- include "kura-operator.fullname" . }}
{{- end }}

{{- define "kura-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kura-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels of every object. managed-by is Helm: the operator's own children carry
managed-by=kura-operator, and the operator prunes only those.
*/}}
{{- define "kura-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kura-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "kura-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Leader election: asked for, or needed because several replicas would otherwise all reconcile. */}}
{{- define "kura-operator.leaderElect" -}}
{{- if or .Values.leaderElection.enabled (gt (int .Values.replicas) 1) (gt (int .Values.shards) 1) }}true{{ end }}
{{- end }}

{{/* OTEL_RESOURCE_ATTRIBUTES from a map: key=value pairs, comma-separated, sorted. */}}
{{- define "kura-operator.resourceAttributes" -}}
{{- $pairs := list -}}
{{- range $k, $v := . -}}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}
