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

{{/* The headless Service of the router pods, and its in-cluster DNS name: one A record per ready
router pod (the chart's Envoy resolves it, each replica a host of its own). */}}
{{- define "condisagg.podsService" -}}
{{- printf "%s-pods" (include "condisagg.fullname" .) -}}
{{- end -}}
{{- define "condisagg.podsHost" -}}
{{- printf "%s.%s.svc.cluster.local" (include "condisagg.podsService" .) .Release.Namespace -}}
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
{{- fail "config.model.tokenizer: the chart sets it from model.tokenizerPath or model.hub; remove it from config" -}}
{{- end -}}
{{- $_ := set $model "tokenizer" (.Values.model.hub | default .Values.model.tokenizerPath) -}}
{{- $_ := set $c "model" $model -}}
{{- if hasKey $c "replicas" -}}
{{- fail "config.replicas: the chart sets it from bus.* and warmStart.*; remove it from config" -}}
{{- end -}}
{{- $r := dict -}}
{{- if .Values.bus.enabled -}}
{{- $url := .Values.bus.url -}}
{{- if and (not $url) .Values.bus.nats.deploy -}}
{{- $url = printf "nats://%s-nats:%d" (include "condisagg.fullname" .) (int .Values.bus.nats.port) -}}
{{- end -}}
{{- if not $url -}}
{{- fail "bus.url: give your NATS server's URL (nats://host:4222), or set bus.nats.deploy=true for the chart's own" -}}
{{- end -}}
{{- $_ := set $r "nats_url" $url -}}
{{- with .Values.bus.lease -}}
{{- $_ := set $r "lease" . -}}
{{- end -}}
{{- end -}}
{{- if .Values.warmStart.enabled -}}
{{- if not .Values.admin.grpc.expose -}}
{{- fail "warmStart.enabled: a starting router copies the index over the Admin gRPC port of the Service; set admin.grpc.expose=true" -}}
{{- end -}}
{{- $_ := set $r "warm_from" (printf "%s.%s.svc:%d" (include "condisagg.fullname" .) .Release.Namespace (int .Values.ports.adminGRPC)) -}}
{{- $_ := set $r "warm_timeout" .Values.warmStart.timeout -}}
{{- end -}}
{{- if $r -}}
{{- $_ := set $c "replicas" $r -}}
{{- end -}}
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

{{/* Fails unless exactly one source of the admin token is given (admin.token.existingSecret or
admin.token.value) and a given value is one condisagg accepts. The chart generates no token: one
made at render time would change on every render without cluster access (helm template, GitOps)
while the running router keeps the old one. The messages never echo the token. */}}
{{- define "condisagg.checkToken" -}}
{{- $t := .Values.admin.token -}}
{{- if and $t.existingSecret $t.value -}}
{{- fail "admin.token: set existingSecret or value, not both" -}}
{{- end -}}
{{- if not (or $t.existingSecret $t.value) -}}
{{- $name := printf "%s-admin-token" (include "condisagg.fullname" .) -}}
{{- fail (printf "admin.token: give the admin token: admin.token.existingSecret=%s after creating that Secret (kubectl -n %s create secret generic %s --from-literal=%s=\"$(openssl rand -hex 32)\"), or admin.token.value; the chart generates none, since a token made at render time would change on every helm template or GitOps sync" $name .Release.Namespace $name $t.secretKey) -}}
{{- end -}}
{{- if and $t.value (not (regexMatch "^[^ \t\r\n]{16,}$" (trim $t.value))) -}}
{{- fail "admin.token.value: must be one token of at least 16 characters without spaces (condisagg refuses a shorter one)" -}}
{{- end -}}
{{- end -}}

{{/* topologySpreadConstraints for a pod template: .list, where a constraint without
labelSelector selects .labels (the pods of the same Deployment). */}}
{{- define "condisagg.topologySpread" -}}
{{- $out := list -}}
{{- range $c := .list -}}
{{- $c = deepCopy $c -}}
{{- if not $c.labelSelector -}}
{{- $_ := set $c "labelSelector" (dict "matchLabels" $.labels) -}}
{{- end -}}
{{- $out = append $out $c -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* Fails on an extra volume or mount that collides with the chart's own, or a mount of no
volume. */}}
{{- define "condisagg.checkExtraVolumes" -}}
{{- $own := list "config" "admin-token" "model" -}}
{{- $names := $own -}}
{{- range $i, $v := .Values.extraVolumes -}}
{{- if has $v.name $own -}}
{{- fail (printf "extraVolumes[%d].name: %q is a volume of the chart (config, admin-token, model); pick another name" $i $v.name) -}}
{{- end -}}
{{- if has $v.name $names -}}
{{- fail (printf "extraVolumes[%d].name: %q is given twice" $i $v.name) -}}
{{- end -}}
{{- $names = append $names $v.name -}}
{{- end -}}
{{- $paths := list (include "condisagg.configDir" .) (include "condisagg.tokenDir" .) (.Values.model.mountPath | trimSuffix "/") -}}
{{- range $i, $m := .Values.extraVolumeMounts -}}
{{- if not (has $m.name $names) -}}
{{- fail (printf "extraVolumeMounts[%d].name: %q names no volume; add it to extraVolumes" $i $m.name) -}}
{{- end -}}
{{- if has ($m.mountPath | trimSuffix "/") $paths -}}
{{- fail (printf "extraVolumeMounts[%d].mountPath: %s is where the chart mounts its own volume; pick another path" $i $m.mountPath) -}}
{{- end -}}
{{- end -}}
{{- range $i, $c := .Values.initContainers -}}
{{- if eq $c.name "condisagg" -}}
{{- fail (printf "initContainers[%d].name: condisagg is the router container's name; pick another" $i) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A pod's affinity: the given affinity, plus with preset "soft" a preferred pod anti-affinity
on the node (kubernetes.io/hostname) for pods with the given labels, unless the affinity has a
podAntiAffinity of its own. Empty when there is nothing to say. */}}
{{- define "condisagg.affinity" -}}
{{- $a := deepCopy (default dict .affinity) -}}
{{- if and (eq .preset "soft") (not (hasKey $a "podAntiAffinity")) -}}
{{- $term := dict "weight" 100 "podAffinityTerm" (dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" .labels)) -}}
{{- $_ := set $a "podAntiAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" (list $term)) -}}
{{- end -}}
{{- if $a -}}
{{- toYaml $a -}}
{{- end -}}
{{- end -}}

{{/* A PodDisruptionBudget's minAvailable or maxUnavailable, from {minAvailable, maxUnavailable}
(one of them) for a workload of .replicas pods named .what (the values path, for errors). */}}
{{- define "condisagg.pdbBound" -}}
{{- $p := .pdb -}}
{{- $min := $p.minAvailable -}}
{{- $max := $p.maxUnavailable -}}
{{- if and (not (kindIs "invalid" $min)) (not (kindIs "invalid" $max)) -}}
{{- fail (printf "%s: minAvailable %v and maxUnavailable %v both set; give one (set the other to null)" .what $min $max) -}}
{{- end -}}
{{- if and (kindIs "invalid" $min) (kindIs "invalid" $max) -}}
{{- fail (printf "%s: give minAvailable (e.g. 1) or maxUnavailable" .what) -}}
{{- end -}}
{{- if not (kindIs "invalid" $min) -}}
{{- if and (not (kindIs "string" $min)) (ge (int $min) (int .replicas)) -}}
{{- fail (printf "%s.minAvailable: %v with %v replicas blocks every node drain; run more replicas, or set minAvailable: null and maxUnavailable: 1" .what $min .replicas) -}}
{{- end -}}
minAvailable: {{ $min }}
{{- else -}}
maxUnavailable: {{ $max }}
{{- end -}}
{{- end -}}

{{/* A duration of gateway.extProcFailover ("5ms", "30s": the schema allows nothing else) in
milliseconds, and in the protobuf JSON form Istio's and Envoy's duration fields take ("0.005s",
"30s"; Envoy Gateway takes the value as written). */}}
{{- define "condisagg.durationMs" -}}
{{- if hasSuffix "ms" . -}}
{{- trimSuffix "ms" . | int64 -}}
{{- else -}}
{{- mul (trimSuffix "s" . | int64) 1000 -}}
{{- end -}}
{{- end -}}
{{- define "condisagg.protoDuration" -}}
{{- printf "%vs" (divf (include "condisagg.durationMs" .) 1000) -}}
{{- end -}}

{{/* Checks gateway.extProcFailover beyond the schema; renders nothing. */}}
{{- define "condisagg.checkExtProcFailover" -}}
{{- $f := .Values.gateway.extProcFailover -}}
{{- if gt (int64 (include "condisagg.durationMs" $f.retryBackOff.baseInterval)) (int64 (include "condisagg.durationMs" $f.retryBackOff.maxInterval)) -}}
{{- fail (printf "gateway.extProcFailover.retryBackOff: maxInterval %s is below baseInterval %s; give a maxInterval at least as long" $f.retryBackOff.maxInterval $f.retryBackOff.baseInterval) -}}
{{- end -}}
{{- end -}}
