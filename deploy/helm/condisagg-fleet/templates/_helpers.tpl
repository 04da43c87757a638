{{- define "fleet.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The pods of one role ("role" in the dict): app: vllm and role: are the labels docs/deploy.md
§2 and the router chart's engineNetworkPolicy example select; the instance keeps two releases
apart. */}}
{{- define "fleet.selectorLabels" -}}
app: vllm
role: {{ .role }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- end -}}

{{/* image of a component: repository:tag, tag "" = the chart's appVersion. */}}
{{- define "fleet.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{/* The served model name clients send. */}}
{{- define "fleet.servedName" -}}
{{- default .Values.model.name .Values.model.servedModelName -}}
{{- end -}}

{{/* vLLM's --kv-events-config: PUB and replay ROUTER bound on every interface (vLLM binds only an
endpoint with "*"; rank r adds r to both ports). */}}
{{- define "fleet.kvEventsConfig" -}}
{{- $c := dict "enable_kv_cache_events" true "publisher" "zmq" "endpoint" (printf "tcp://*:%d" (int .Values.ports.kvEvents)) "replay_endpoint" (printf "tcp://*:%d" (int .Values.ports.kvReplay)) "topic" .Values.kvEvents.topic -}}
{{- if .Values.kvEvents.bufferSteps }}{{ $_ := set $c "buffer_steps" (int .Values.kvEvents.bufferSteps) }}{{ end -}}
{{- toJson $c -}}
{{- end -}}

{{/* --kv-transfer-config of a role: NixlConnector, kv_producer or kv_consumer, plus the role's
kvTransferConfig keys. */}}
{{- define "fleet.kvTransferConfig" -}}
{{- $rv := index .ctx.Values .role -}}
{{- $c := deepCopy (default (dict) $rv.kvTransferConfig) -}}
{{- $_ := set $c "kv_connector" "NixlConnector" -}}
{{- $_ := set $c "kv_role" (ternary "kv_producer" "kv_consumer" (eq .role "prefill")) -}}
{{- toJson $c -}}
{{- end -}}

{{/* The engine's arguments (vLLM's or vllm-sim's), every flag condisagg relies on. */}}
{{- define "fleet.engineArgs" -}}
{{- $v := .ctx.Values -}}
{{- $rv := index .ctx.Values .role -}}
{{- $args := list -}}
{{- if eq $v.engine.kind "vllm" -}}
{{- $args = list $v.model.name "--served-model-name" (include "fleet.servedName" .ctx) -}}
{{- else -}}
{{- $args = list "--host" "0.0.0.0" "--model" (include "fleet.servedName" .ctx) "--tokenizer" (default (printf "hf:%s" $v.model.name) $v.model.tokenizer) -}}
{{- end -}}
{{- $args = concat $args (list "--port" (toString (int $v.ports.http))
  "--block-size" (toString (int $v.blockSize))
  "--max-model-len" (toString (int $v.maxModelLen))
  "--max-num-batched-tokens" (toString (int $rv.maxNumBatchedTokens))
  "--data-parallel-size" (toString (int $rv.dataParallelSize))
  "--enable-prompt-tokens-details"
  "--kv-events-config" (include "fleet.kvEventsConfig" .ctx)
  "--kv-transfer-config" (include "fleet.kvTransferConfig" .)) -}}
{{- if eq $v.engine.kind "vllm-sim" -}}
{{- $args = concat $args (list "--time-scale" (toString $v.engine.vllmSim.timeScale)) -}}
{{- if $v.engine.vllmSim.perfModel }}{{ $args = concat $args (list "--perf-model" $v.engine.vllmSim.perfModel) }}{{ end -}}
{{- if $v.engine.vllmSim.numGpuBlocks }}{{ $args = concat $args (list "--num-gpu-blocks" (toString (int $v.engine.vllmSim.numGpuBlocks))) }}{{ end -}}
{{- end -}}
{{- toYaml (concat $args (default (list) $rv.extraArgs)) -}}
{{- end -}}

{{/* fleet.validate fails with the chart's message on values the schema cannot judge alone. */}}
{{- define "fleet.validate" -}}
{{- $v := .Values -}}
{{- if not $v.model.name -}}
{{- fail "model.name: required: the model the engines serve (vLLM's model, e.g. Qwen/Qwen3-8B; set with --set model.name=...)" -}}
{{- end -}}
{{- if and (eq $v.engine.kind "vllm-sim") (not $v.model.tokenizer) (hasPrefix "/" $v.model.name) -}}
{{- fail (printf "model.tokenizer: required with engine.kind vllm-sim when model.name %q is a path: a tokenizer directory in the pod or hf:<org>/<model>" $v.model.name) -}}
{{- end -}}
{{- $seen := dict -}}
{{- $single := dict "ports.http" $v.ports.http "sidecar.port" $v.sidecar.port -}}
{{- if $v.sidecar.metricsPort }}{{ $_ := set $single "sidecar.metricsPort" $v.sidecar.metricsPort }}{{ end -}}
{{- range $field, $p := $single }}{{ $_ := set $seen (toString (int $p)) $field }}{{ end -}}
{{- $n := 1 -}}
{{- range $role := list "prefill" "decode" -}}
{{- $dp := int (index $v $role).dataParallelSize -}}
{{- if lt $dp 1 -}}
{{- fail (printf "%s.dataParallelSize: %d must be at least 1 (vLLM's --data-parallel-size: engines behind the pod's one HTTP server)" $role $dp) -}}
{{- end -}}
{{- if gt $dp $n }}{{ $n = $dp }}{{ end -}}
{{- range $k := list "kv_connector" "kv_role" -}}
{{- if hasKey (default (dict) (index $v $role).kvTransferConfig) $k -}}
{{- fail (printf "%s.kvTransferConfig.%s: set by the chart (NixlConnector, kv_producer for prefill, kv_consumer for decode); remove it" $role $k) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $field, $base := dict "ports.kvEvents" $v.ports.kvEvents "ports.kvReplay" $v.ports.kvReplay "ports.nixlSideChannel" $v.ports.nixlSideChannel -}}
{{- if gt (add (int $base) (sub $n 1)) 65535 -}}
{{- fail (printf "%s: %d plus %d data-parallel ranks passes 65535; choose a lower port" $field (int $base) $n) -}}
{{- end -}}
{{- range $r := until $n -}}
{{- $p := toString (add (int $base) $r) -}}
{{- if hasKey $seen $p -}}
{{- if eq $n 1 -}}
{{- fail (printf "%s: port %s is also %s's; every port of an engine pod must be its own" $field $p (get $seen $p)) -}}
{{- end -}}
{{- fail (printf "%s: rank %d's port %s is also %s's; with data-parallel size %d the rank ports are base to base+%d, so give the bases room" $field $r $p (get $seen $p) $n (sub $n 1)) -}}
{{- end -}}
{{- $_ := set $seen $p (printf "%s (rank %d)" $field $r) -}}
{{- end -}}
{{- end -}}
{{- end -}}
