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

{{/*
Who manages the CRD named `name` (dict "name" … "root" $), when not this
release: empty when it does not exist or this release manages it (Helm's
ownership annotations name it), so that this release renders it; otherwise
"release R in namespace N", or "no Helm release" (applied with kubectl).
`helm template` and client-side dry runs see no cluster: empty.
*/}}
{{- define "kura-operator.crdOwner" -}}
{{- $root := .root }}
{{- $existing := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" .name }}
{{- if $existing }}
{{- $annotations := $existing.metadata.annotations | default dict }}
{{- $release := get $annotations "meta.helm.sh/release-name" }}
{{- $namespace := get $annotations "meta.helm.sh/release-namespace" }}
{{- if not $release }}no Helm release
{{- else if not (and (eq $release $root.Release.Name) (eq $namespace $root.Release.Namespace)) }}release {{ $release }} in namespace {{ $namespace }}
{{- end }}
{{- end }}
{{- end }}

{{/* "true" when a CRD of the chart exists and is managed by someone else. */}}
{{- define "kura-operator.crdsElsewhere" -}}
{{- range $path, $_ := $.Files.Glob "files/crds/*.yaml" }}
{{- if include "kura-operator.crdOwner" (dict "name" ($.Files.Get $path | fromYaml).metadata.name "root" $) }}true{{ end }}
{{- end }}
{{- end }}

{{/*
The example domains of `config.regions` in force (the chart's default region
uses kura.example.com; example.com is reserved and never a real one), comma
separated; empty when none.
*/}}
{{- define "kura-operator.exampleConfig" -}}
{{- $found := list }}
{{- range $name, $region := .Values.config.regions }}
{{- $domain := toString (get $region "domain") }}
{{- if or (eq $domain "example.com") (hasSuffix ".example.com" $domain) }}
{{- $found = append $found $domain }}
{{- end }}
{{- end }}
{{- join ", " (uniq $found) }}
{{- end }}
