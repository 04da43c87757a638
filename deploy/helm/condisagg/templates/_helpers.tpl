{{/* The chart name, or nameOverride. */}}
{{- define "condisagg.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's object name: fullnameOverride, else the release name when it already holds the
chart name, else <release>-<chart>. */}}
{{- define "condisagg.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "condisagg.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "condisagg.instanceLabels" -}}
app.kubernetes.io/name: {{ include "condisagg.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The router's pods (the gateway's Envoy pods carry component: gateway). */}}
{{- define "condisagg.selectorLabels" -}}
{{ include "condisagg.instanceLabels" . }}
app.kubernetes.io/component: router
{{- end -}}

{{- define "condisagg.gatewaySelectorLabels" -}}
{{ include "condisagg.instanceLabels" . }}
app.kubernetes.io/component: gateway
{{- end -}}

{{- define "condisagg.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "condisagg.instanceLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The Secret holding the admin bearer token. */}}
{{- define "condisagg.tokenSecret" -}}
{{- default (printf "%s-admin-token" (include "condisagg.fullname" .)) .Values.admin.token.existingSecret -}}
{{- end -}}

{{/* The in-cluster DNS name of the condisagg Service (the gateway's ext_proc target). */}}
{{- define "condisagg.extProcHost" -}}
{{- printf "%s.%s.svc.cluster.local" (include "condisagg.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/* The in-cluster DNS name of the decode Service (fail-open traffic). */}}
{{- define "condisagg.decodeHost" -}}
{{- printf "%s.%s.svc.cluster.local" .Values.gateway.decodeService.name .Release.Namespace -}}
{{- end -}}

{{/* Paths inside the condisagg container. */}}
{{- define "condisagg.configDir" -}}/etc/condisagg{{- end -}}
{{- define "condisagg.tokenDir" -}}/etc/condisagg-admin{{- end -}}

{{/* The serve config: .Values.config plus the keys the chart owns. */}}
{{- define "condisagg.serveConfig" -}}
{{- $c := deepCopy .Values.config -}}
{{- range $k := list "listen" "allow_unauthenticated_listen" "admin_listen" "admin_grpc_listen" "admin_token_file" "admin_tls_cert" "admin_tls_key" "admin_client_ca" -}}
{{- if hasKey $c $k -}}
{{- fail (printf "config.%s: the chart sets it (ports.*, admin.*); remove it from config" $k) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $c "listen" (printf "0.0.0.0:%d" (int .Values.ports.extProc)) -}}
{{- /* Off loopback condisagg needs mTLS or the statement that the network admits only the
gateway: the chart's NetworkPolicy makes it, or the operator does (extProc.allowUnauthenticated). */ -}}
{{- if not (or .Values.networkPolicy.enabled .Values.extProc.allowUnauthenticated) -}}
{{- fail "networkPolicy.enabled=false leaves the ext_proc port open to every pod: keep the NetworkPolicy, or set extProc.allowUnauthenticated=true if your own policy or firewall admits only the gateway" -}}
{{- end -}}
{{- $_ := set $c "allow_unauthenticated_listen" true -}}
{{- $_ := set $c "admin_listen" (printf "0.0.0.0:%d" (int .Values.ports.admin)) -}}
{{- $grpcHost := ternary "0.0.0.0" "127.0.0.1" .Values.admin.grpc.expose -}}
{{- $_ := set $c "admin_grpc_listen" (printf "%s:%d" $grpcHost (int .Values.ports.adminGRPC)) -}}
{{- $_ := set $c "admin_token_file" (printf "%s/%s" (include "condisagg.tokenDir" .) .Values.admin.token.secretKey) -}}
{{- if hasKey $c "models" -}}
{{- fail "config.models: the chart serves one model (model.tokenizerPath); the several-model form is not supported by the chart yet" -}}
{{- end -}}
{{- $model := deepCopy (default dict $c.model) -}}
{{- if hasKey $model "tokenizer" -}}
{{- fail "config.model.tokenizer: the chart sets it from model.tokenizerPath; remove it from config" -}}
{{- end -}}
{{- $_ := set $model "tokenizer" .Values.model.tokenizerPath -}}
{{- $_ := set $c "model" $model -}}
{{- if and (not $c.workers) (not (include "condisagg.kubeDiscovery" .)) -}}
{{- fail "config.workers: list at least one decode worker, or discover them with config.discovery.kubernetes" -}}
{{- end -}}
{{- toYaml $c -}}
{{- end -}}

{{/* The router's ServiceAccount. */}}
{{- define "condisagg.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "condisagg.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* "true" when the serve config has Kubernetes discovery (config.discovery.kubernetes). */}}
{{- define "condisagg.kubeDiscovery" -}}
{{- $d := default dict .Values.config.discovery -}}
{{- if $d.kubernetes -}}true{{- end -}}
{{- end -}}

{{/* The namespaces Kubernetes discovery watches, comma-separated and sorted: each entry's
namespace, else discovery.kubernetes.namespace, else the release namespace. */}}
{{- define "condisagg.discoveryNamespaces" -}}
{{- $k := .Values.config.discovery.kubernetes -}}
{{- $default := default .Release.Namespace $k.namespace -}}
{{- $ns := list -}}
{{- range $e := (default list $k.workers) -}}
{{- $ns = append $ns (default $default $e.namespace) -}}
{{- end -}}
{{- if not $ns -}}{{- $ns = list $default -}}{{- end -}}
{{- $ns | uniq | sortAlpha | join "," -}}
{{- end -}}
