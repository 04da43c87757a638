package observability

import (
	"encoding/json"
	"fmt"
)

// Dashboard model (the subset of Grafana's JSON model the dashboard uses).
type (
	dashboard struct {
		UID           string     `json:"uid"`
		Title         string     `json:"title"`
		Description   string     `json:"description"`
		Tags          []string   `json:"tags"`
		Timezone      string     `json:"timezone"`
		Editable      bool       `json:"editable"`
		GraphTooltip  int        `json:"graphTooltip"`
		Refresh       string     `json:"refresh"`
		SchemaVersion int        `json:"schemaVersion"`
		Time          timeRange  `json:"time"`
		Templating    templating `json:"templating"`
		Panels        []panel    `json:"panels"`
	}
	timeRange struct {
		From string `json:"from"`
		To   string `json:"to"`
	}
	templating struct {
		List []variable `json:"list"`
	}
	variable struct {
		Name       string      `json:"name"`
		Label      string      `json:"label"`
		Type       string      `json:"type"`
		Query      any         `json:"query"`
		Datasource *datasource `json:"datasource,omitempty"`
		Definition string      `json:"definition,omitempty"`
		Refresh    int         `json:"refresh,omitempty"`
		IncludeAll bool        `json:"includeAll,omitempty"`
		Multi      bool        `json:"multi,omitempty"`
		AllValue   string      `json:"allValue,omitempty"`
		Sort       int         `json:"sort,omitempty"`
	}
	datasource struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	}
	panel struct {
		ID          int          `json:"id"`
		Type        string       `json:"type"`
		Title       string       `json:"title"`
		Description string       `json:"description,omitempty"`
		GridPos     gridPos      `json:"gridPos"`
		Datasource  *datasource  `json:"datasource,omitempty"`
		Targets     []target     `json:"targets,omitempty"`
		FieldConfig *fieldConfig `json:"fieldConfig,omitempty"`
		Options     any          `json:"options,omitempty"`
		Collapsed   *bool        `json:"collapsed,omitempty"`
	}
	gridPos struct {
		H int `json:"h"`
		W int `json:"w"`
		X int `json:"x"`
		Y int `json:"y"`
	}
	target struct {
		RefID        string      `json:"refId"`
		Expr         string      `json:"expr"`
		LegendFormat string      `json:"legendFormat,omitempty"`
		Format       string      `json:"format,omitempty"`
		Datasource   *datasource `json:"datasource,omitempty"`
	}
	fieldConfig struct {
		Defaults  fieldDefaults `json:"defaults"`
		Overrides []any         `json:"overrides"`
	}
	fieldDefaults struct {
		Unit   string         `json:"unit,omitempty"`
		Min    *float64       `json:"min,omitempty"`
		Max    *float64       `json:"max,omitempty"`
		Custom map[string]any `json:"custom,omitempty"`
	}
)

// promDS is the dashboard's Prometheus data source: the ${datasource} variable.
var promDS = &datasource{Type: "prometheus", UID: "${datasource}"}

// sel is the label selector every query carries: the chosen jobs and instances.
const sel = `job=~"$job",instance=~"$instance"`

// decided selects policy decisions: not passthrough (no prompt), failure_open (pipeline failure)
// nor request_chat_template (a client's own template: no prompt to decide on).
const decided = `reason!~"passthrough|failure_open|request_chat_template"`

// q builds a metric selector with the dashboard's job/instance filter and extra matchers.
func q(metric string, matchers ...string) string {
	s := metric + "{"
	for _, m := range matchers {
		s += m + ","
	}
	return s + sel + "}"
}

// series is one query of a panel.
type series struct {
	expr, legend string
}

// spec describes one panel before layout.
type spec struct {
	title, description, kind, unit string
	min, max                       *float64
	stack                          bool
	series                         []series
	heatmap                        bool // the query returns buckets to draw as a heatmap
}

// row is a titled group of panels, laid out two per line.
type row struct {
	title  string
	panels []spec
}

func f(v float64) *float64 { return &v }

// quantiles returns p50/p90/p99 series of a histogram.
func quantiles(bucket string, matchers ...string) []series {
	var out []series
	for _, p := range []struct{ q, name string }{{"0.5", "p50"}, {"0.9", "p90"}, {"0.99", "p99"}} {
		out = append(out, series{
			expr:   fmt.Sprintf("histogram_quantile(%s, sum by (le) (rate(%s[$__rate_interval])))", p.q, q(bucket, matchers...)),
			legend: p.name,
		})
	}
	return out
}

// rows is the dashboard's content, top to bottom.
func rows() []row {
	return []row{gatewayRow(), decisionsRow(), cacheCreditRow(), transfersRow(), bookedLoadRow(), eventStreamsRow(), indexRow(), latencyRow(), workersRow(), sloRow()}
}

// rateOf is the per-second rate of a counter over Grafana's rate interval, filtered.
func rateOf(metric string, matchers ...string) string {
	return fmt.Sprintf("rate(%s[$__rate_interval])", q(metric, matchers...))
}

// gatewayRow shows whether the routers answer, and Envoy's own view of its ext_proc calls. The
// Envoy series carry the gateway's job and instance, not the router's, so they are not filtered
// by the dashboard's variables: they sum every scraped Envoy, per HTTP connection manager.
func gatewayRow() row {
	envoyRate := func(stat string) string {
		return fmt.Sprintf("sum by (envoy_http_conn_manager_prefix) (rate(envoy_http_ext_proc_%s[$__rate_interval]))", stat)
	}
	return row{"Routers and gateway", []spec{
		{title: "Routers up", kind: "state-timeline", min: f(0), max: f(1),
			description: "1 = Prometheus scrapes the router, 0 = it does not answer (alert CondisaggRouterDown).",
			series:      []series{{fmt.Sprintf("max by (instance) (%s)", q("up")), "{{instance}}"}}},
		{title: "Envoy ext_proc calls", kind: "timeseries", unit: "reqps",
			description: "Envoy's statistics of its ext_proc filter (all scraped Envoys): streams started, failed or timed out (the request is refused or forwarded without a decision), and forwarded fail-open (failure_mode_allow: no KV awareness). Alerts CondisaggGatewayExtProcFailing and CondisaggGatewayFailOpen.",
			series: []series{
				{envoyRate("streams_started"), "started {{envoy_http_conn_manager_prefix}}"},
				{envoyRate("streams_failed"), "failed {{envoy_http_conn_manager_prefix}}"},
				{envoyRate("message_timeouts"), "timed out {{envoy_http_conn_manager_prefix}}"},
				{envoyRate("failure_mode_allowed"), "fail-open {{envoy_http_conn_manager_prefix}}"},
			}},
	}}
}

// decisionsRow shows the decision counts by reason and route, the bypass ratio and fallbacks.
func decisionsRow() row {
	bypass := fmt.Sprintf("sum(%s) / sum(%s)", rateOf("condisagg_decisions_total", `route="decode"`, decided), rateOf("condisagg_decisions_total", decided))
	return row{"Decisions", []spec{
		{title: "Decisions by reason", kind: "timeseries", unit: "reqps", stack: true,
			description: "Routing decisions per second by route and the policy's reason (conditional-disagg.md §8.1).",
			series:      []series{{fmt.Sprintf("sum by (route, reason) (%s)", rateOf("condisagg_decisions_total")), "{{route}}: {{reason}}"}}},
		{title: "Placement: decisions by route", kind: "timeseries", unit: "reqps", stack: true,
			description: "prefill = remote prefill then KV transfer; decode = one decode worker prefills locally (bypass); prefill_local = the slo policy ran the whole request on a prefill worker. Rejected requests by reason below them.",
			series: []series{
				{fmt.Sprintf("sum by (route) (%s)", rateOf("condisagg_decisions_total")), "{{route}}"},
				{fmt.Sprintf("sum by (reason) (%s)", rateOf("condisagg_requests_rejected_total")), "rejected: {{reason}}"},
			}},
		{title: "Bypass ratio", kind: "timeseries", unit: "percentunit", min: f(0), max: f(1),
			description: "Share of policy decisions (not passthrough, failure_open or request_chat_template) routed to local prefill on a decode worker.",
			series:      []series{{bypass, "bypass ratio"}}},
		{title: "Fallback and failure decisions", kind: "timeseries", unit: "reqps",
			description: "Requests not decided by the policy: passthrough (no prompt), failure_open (pipeline failure under --failure-mode open), request_chat_template (a client's own chat template), and internal errors.",
			series: []series{
				{fmt.Sprintf("sum by (reason) (%s)", rateOf("condisagg_decisions_total", `reason=~"passthrough|failure_open|request_chat_template"`)), "{{reason}}"},
				{fmt.Sprintf("sum(%s)", rateOf("condisagg_internal_errors_total")), "internal errors"},
			}},
	}}
}

// cacheCreditRow shows how much of each prompt the router credits as cached, and how right it is.
func cacheCreditRow() row {
	return row{"Cache credit", []spec{
		{title: "Credited cache: effective ISL ratio", kind: "heatmap", heatmap: true,
			description: "Distribution of effective ISL / ISL of policy decisions on the previewed decode worker: 0 = fully cached prompt, 1 = nothing credited.",
			series:      []series{{fmt.Sprintf("sum by (le) (increase(%s[$__rate_interval]))", q("condisagg_effective_isl_ratio_bucket")), "{{le}}"}}},
		{title: "Effective ISL (uncached prompt tokens)", kind: "timeseries", unit: "short",
			description: "Quantiles of the prompt tokens not cached on the previewed decode worker.",
			series:      quantiles("condisagg_effective_isl_tokens_bucket")},
		{title: "Cached tokens reported by the engines", kind: "timeseries", unit: "percentunit", min: f(0), max: f(1),
			description: "usage cached tokens / usage prompt tokens of answered requests, by route.",
			series: []series{{fmt.Sprintf("sum by (route) (%s) / sum by (route) (%s)",
				rateOf("condisagg_usage_tokens_total", `kind="cached"`), rateOf("condisagg_usage_tokens_total", `kind="prompt"`)), "{{route}}"}}},
		{title: "Credit error on bypass requests", kind: "timeseries", unit: "short",
			description: "Quantiles of the engine's cached_tokens minus the router's credited cache on local-prefill requests: near 0 when the index tracks the engines.",
			series:      quantiles("condisagg_cached_tokens_error_bucket")},
	}}
}

// transfersRow shows whether remote-prefill requests' decode legs used the transferred KV
// (docs/disagg-truth.md).
func transfersRow() row {
	classified := `outcome=~"transferred|recomputed|failed"`
	return row{"Disaggregation truth", []spec{
		{title: "Recomputed share of KV transfers", kind: "timeseries", unit: "percentunit", min: f(0), max: f(1),
			description: "Per prefill/decode pair: remote-prefill requests whose decode worker did not use the transferred KV (it reported less than the prompt as cached, or failed the load and prefilled again) over those classified. Answers without usage are left out.",
			series: []series{{fmt.Sprintf("sum by (prefill, decode) (%s) / sum by (prefill, decode) (%s)",
				rateOf("condisagg_disagg_transfers_total", `outcome=~"recomputed|failed"`), rateOf("condisagg_disagg_transfers_total", classified)), "{{prefill}} → {{decode}}"}}},
		{title: "KV transfers by outcome", kind: "timeseries", unit: "reqps", stack: true,
			description: "Remote-prefill requests per second: transferred (decode used the KV), recomputed, failed (the load failed; prefilled again at decode), unknown (no usage in the answer: streams need stream_options.include_usage).",
			series:      []series{{fmt.Sprintf("sum by (outcome) (%s)", rateOf("condisagg_disagg_transfers_total")), "{{outcome}}"}}},
	}}
}

// bookedLoadRow shows the load the router books on each worker.
func bookedLoadRow() row {
	return row{"Booked load per worker", []spec{
		{title: "Booked prefill tokens", kind: "timeseries", unit: "short",
			description: "Uncached prompt tokens booked by the router whose prefill has not finished.",
			series:      []series{{fmt.Sprintf("sum by (worker) (%s)", q("condisagg_active_prefill_tokens")), "{{worker}}"}}},
		{title: "Booked decode KV blocks / capacity", kind: "timeseries", unit: "percentunit", min: f(0),
			description: "Router-booked decode blocks over the worker's KV capacity (workers of unknown capacity are left out).",
			series: []series{{fmt.Sprintf("sum by (worker) (%s) / sum by (worker) (%s > 0)",
				q("condisagg_active_decode_blocks"), q("condisagg_kv_capacity_blocks")), "{{worker}}"}}},
		{title: "Open bookings", kind: "timeseries", unit: "short", stack: true,
			description: "Requests booked on each worker and not yet released.",
			series:      []series{{fmt.Sprintf("sum by (worker) (%s)", q("condisagg_active_requests")), "{{worker}}"}}},
		{title: "Bookings expired and guard denials", kind: "timeseries", unit: "ops",
			description: "Bookings released by the TTL sweep (their response was never observed) and bypass commits denied by the decode-busy guard.",
			series: []series{
				{fmt.Sprintf("sum(%s)", rateOf("condisagg_accounting_expired_total")), "expired"},
				{fmt.Sprintf("sum(%s)", rateOf("condisagg_guard_commit_denied_total")), "guard denied"},
			}},
	}}
}

// eventStreamsRow shows the health, freshness and faults of the KV event streams.
func eventStreamsRow() row {
	return row{"KV event streams", []spec{
		{title: "Time since last applied batch", kind: "timeseries", unit: "s",
			description: "Per worker. An idle engine publishes nothing, so this grows without load; with load it should stay small.",
			series:      []series{{fmt.Sprintf("time() - max by (worker) (%s)", q("condisagg_kv_last_event_timestamp_seconds")), "{{worker}}"}}},
		{title: "Event lag", kind: "timeseries", unit: "s",
			description: "Receive time minus the batch's engine timestamp.",
			series:      quantiles("condisagg_kv_event_lag_seconds_bucket")},
		{title: "Stream faults", kind: "timeseries", unit: "ops",
			description: "Sequence gaps, replays by outcome, reconnects, publisher restarts, history lost and dropped messages, per worker.",
			series: []series{
				{fmt.Sprintf("sum by (worker) (%s)", rateOf("condisagg_kv_gaps_total")), "gap {{worker}}"},
				{fmt.Sprintf("sum by (worker, outcome) (%s)", rateOf("condisagg_kv_replays_total")), "replay {{outcome}} {{worker}}"},
				{fmt.Sprintf("sum by (worker) (%s)", rateOf("condisagg_kv_reconnects_total")), "reconnect {{worker}}"},
				{fmt.Sprintf("sum by (worker) (%s)", rateOf("condisagg_kv_publisher_restarts_total")), "restart {{worker}}"},
				{fmt.Sprintf("sum by (worker) (%s)", rateOf("condisagg_kv_history_lost_total")), "history lost {{worker}}"},
				{fmt.Sprintf("sum by (worker, reason) (%s)", rateOf("condisagg_kv_messages_dropped_total")), "dropped {{reason}} {{worker}}"},
			}},
		{title: "Silent streams and events applied", kind: "timeseries", unit: "short",
			description: "Workers whose stream the router considers silent (by pool), and KV events applied per second.",
			series: []series{
				{fmt.Sprintf("max by (pool) (%s)", q("condisagg_kv_events_silent_workers")), "silent {{pool}}"},
				{fmt.Sprintf("sum(%s)", rateOf("condisagg_kv_events_total")), "events/s"},
			}},
	}}
}

// indexRow shows the prefix index.
func indexRow() row {
	return row{"Prefix index", []spec{
		{title: "Indexed blocks per worker and medium", kind: "timeseries", unit: "short", stack: true,
			description: "Prefix-index entries (KV blocks the router believes each worker holds).",
			series:      []series{{fmt.Sprintf("sum by (worker, medium) (%s)", q("condisagg_indexed_blocks")), "{{worker}} {{medium}}"}}},
		{title: "Index size", kind: "stat", unit: "short",
			description: "All indexed blocks.",
			series:      []series{{fmt.Sprintf("sum(%s)", q("condisagg_indexed_blocks")), "blocks"}}},
	}}
}

// latencyRow shows decision latency.
func latencyRow() row {
	return row{"Decision latency", []spec{
		{title: "Decision latency p99 by stage", kind: "timeseries", unit: "s",
			description: "tokenize, overlap, decide, book and their total.",
			series: []series{{fmt.Sprintf("histogram_quantile(0.99, sum by (stage, le) (rate(%s[$__rate_interval])))",
				q("condisagg_decision_seconds_bucket")), "{{stage}}"}}},
		{title: "Decision latency (total)", kind: "timeseries", unit: "s",
			series: quantiles("condisagg_decision_seconds_bucket", `stage="total"`)},
	}}
}

// workersRow shows worker health and ext_proc streams.
func workersRow() row {
	return row{"Workers", []spec{
		{title: "Worker health", kind: "state-timeline", min: f(0), max: f(1),
			description: "1 = eligible for selection, 0 = excluded (failed probes or upstream failures).",
			series:      []series{{fmt.Sprintf("max by (worker, role) (%s)", q("condisagg_worker_healthy")), "{{role}} {{worker}}"}}},
		{title: "Healthy workers by role", kind: "timeseries", unit: "short",
			description: "Eligible workers against discovered workers.",
			series: []series{
				{fmt.Sprintf("sum by (role) (%s)", q("condisagg_worker_healthy")), "healthy {{role}}"},
				{fmt.Sprintf("sum by (role) (%s)", q("condisagg_pool_workers")), "discovered {{role}}"},
			}},
		{title: "Health transitions", kind: "timeseries", unit: "ops",
			series: []series{{fmt.Sprintf("sum by (worker, reason) (%s)", rateOf("condisagg_worker_health_transitions_total")), "{{worker}} {{reason}}"}}},
		{title: "ext_proc streams", kind: "timeseries", unit: "short",
			description: "Open ext_proc streams (requests in flight through Envoy) and stream errors per second.",
			series: []series{
				{fmt.Sprintf("sum(%s)", q("condisagg_extproc_active_streams")), "open streams"},
				{fmt.Sprintf("sum by (reason) (%s)", rateOf("condisagg_extproc_stream_errors_total")), "errors {{reason}}"},
			}},
	}}
}

// sloRow shows the slo policy's controller and role advice, the shadow candidate's agreement,
// the prefill leg and worker discovery.
func sloRow() row {
	same := fmt.Sprintf("sum(%s) / sum(%s)", rateOf("condisagg_shadow_decisions_total", `same_workers="true"`), rateOf("condisagg_shadow_decisions_total"))
	return row{"SLO policy, shadow and discovery", []spec{
		{title: "Shadow candidate: route pairs", kind: "timeseries", unit: "reqps", stack: true,
			description: "Requests the candidate config (router.shadow_disagg_config) decided beside the live one, by live and candidate route. `condisagg shadow` has the detail.",
			series: []series{
				{fmt.Sprintf("sum by (live_route, shadow_route) (%s)", rateOf("condisagg_shadow_decisions_total")), "{{live_route}} → {{shadow_route}}"},
			}},
		{title: "Shadow candidate: same workers", kind: "timeseries", unit: "percentunit", min: f(0), max: f(1),
			description: "Share of requests on which the candidate chose the same route and workers as the live config.",
			series:      []series{{same, "agreement"}}},
		{title: "slo controller corrections", kind: "timeseries", unit: "short",
			description: "Multipliers the slo policy applies to its TTFT and TPOT forecasts per placement (1 = the cost model is right) within [1/bound, bound]; observed/forecast ratios learned from the response phase; how often a correction turned back in the last hour (alerts: CondisaggSLOFeedbackPinned, CondisaggSLOFeedbackOscillating).",
			series: []series{
				{fmt.Sprintf("max by (route, metric) (%s)", q("condisagg_slo_feedback_factor")), "factor {{route}} {{metric}}"},
				{fmt.Sprintf("max by (route, metric) (%s)", q("condisagg_slo_feedback_ratio")), "ratio {{route}} {{metric}}"},
				{fmt.Sprintf("max(%s)", q("condisagg_slo_feedback_bound")), "bound"},
				{fmt.Sprintf("sum by (route, metric) (increase(%s[1h]))", q("condisagg_slo_feedback_reversals_total")), "reversals/h {{route}} {{metric}}"},
			}},
		{title: "Role advice", kind: "timeseries", unit: "short",
			description: "Prefill workers the observed mix calls for (slo policy's cost model, analytic) against the prefill workers discovered.",
			series: []series{
				{fmt.Sprintf("max(%s)", q("condisagg_role_advice_prefill_workers")), "advised prefill workers"},
				{fmt.Sprintf("sum(%s)", q("condisagg_pool_workers", `role="prefill"`)), "prefill workers"},
			}},
		{title: "Prefill leg", kind: "timeseries", unit: "s",
			description: "Remote path: the prefill leg's duration as pd-sidecar reports it (X-Condisagg-Prefill-Ms); the prefill booking ends then.",
			series:      quantiles("condisagg_prefill_leg_seconds_bucket")},
		{title: "Kubernetes discovery", kind: "timeseries", unit: "short",
			description: "Workers discovered from EndpointSlices per role, and discovery errors per second.",
			series: []series{
				{fmt.Sprintf("sum by (role) (%s)", q("condisagg_discovery_workers")), "discovered {{role}}"},
				{fmt.Sprintf("sum by (reason) (%s)", rateOf("condisagg_discovery_errors_total")), "errors {{reason}}"},
			}},
	}}
}

// variables are the dashboard's template variables: data source, job and instance.
func variables() []variable {
	return []variable{
		{Name: "datasource", Label: "Data source", Type: "datasource", Query: "prometheus"},
		{Name: "job", Label: "Job", Type: "query", Datasource: promDS, Refresh: 2, Sort: 1,
			IncludeAll: true, Multi: true, AllValue: ".*",
			Definition: "label_values(condisagg_pool_workers, job)",
			Query:      map[string]any{"query": "label_values(condisagg_pool_workers, job)", "refId": "job"}},
		{Name: "instance", Label: "Instance", Type: "query", Datasource: promDS, Refresh: 2, Sort: 1,
			IncludeAll: true, Multi: true, AllValue: ".*",
			Definition: `label_values(condisagg_pool_workers{job=~"$job"}, instance)`,
			Query:      map[string]any{"query": `label_values(condisagg_pool_workers{job=~"$job"}, instance)`, "refId": "instance"}},
	}
}

// build lays the rows out (a full-width row header, then two panels per line) and numbers panels.
func build() dashboard {
	d := dashboard{
		UID: "condisagg", Title: "condisagg",
		Description:  "Conditional disaggregation router: decisions, cache credit, disaggregation truth, booked load, KV event streams, index, latency, workers.",
		Tags:         []string{"condisagg", "llm", "envoy"},
		Timezone:     "browser",
		Editable:     true,
		GraphTooltip: 1, Refresh: "30s", SchemaVersion: 39,
		Time:       timeRange{From: "now-3h", To: "now"},
		Templating: templating{List: variables()},
	}
	id, y := 0, 0
	next := func() int { id++; return id }
	collapsed := false
	for _, r := range rows() {
		d.Panels = append(d.Panels, panel{ID: next(), Type: "row", Title: r.title, Collapsed: &collapsed,
			GridPos: gridPos{H: 1, W: 24, X: 0, Y: y}})
		y++
		for i, s := range r.panels {
			x := 12 * (i % 2)
			if i > 0 && i%2 == 0 {
				y += 8
			}
			d.Panels = append(d.Panels, s.panel(next(), gridPos{H: 8, W: 12, X: x, Y: y}))
		}
		y += 8
	}
	return d
}

// panel turns a spec into a Grafana panel.
func (s spec) panel(id int, pos gridPos) panel {
	p := panel{ID: id, Type: s.kind, Title: s.title, Description: s.description, GridPos: pos, Datasource: promDS}
	for i, se := range s.series {
		t := target{RefID: string(rune('A' + i)), Expr: se.expr, LegendFormat: se.legend, Datasource: promDS}
		if s.heatmap {
			t.Format = "heatmap"
		}
		p.Targets = append(p.Targets, t)
	}
	fc := &fieldConfig{Defaults: fieldDefaults{Unit: s.unit, Min: s.min, Max: s.max}, Overrides: []any{}}
	if s.kind == "timeseries" {
		fc.Defaults.Custom = map[string]any{"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never"}
		if s.stack {
			fc.Defaults.Custom["stacking"] = map[string]any{"mode": "normal", "group": "A"}
			fc.Defaults.Custom["fillOpacity"] = 60
		}
		p.Options = map[string]any{"legend": map[string]any{"displayMode": "table", "placement": "right", "calcs": []string{"mean", "max"}},
			"tooltip": map[string]any{"mode": "multi", "sort": "desc"}}
	}
	if s.heatmap {
		p.Options = map[string]any{"calculate": false, "yAxis": map[string]any{"unit": "percentunit"},
			"cellGap": 1, "color": map[string]any{"mode": "scheme", "scheme": "Oranges"}}
	}
	p.FieldConfig = fc
	return p
}

// JSON returns the dashboard as Grafana dashboard JSON (two-space indented, newline-terminated).
func JSON() ([]byte, error) {
	out, err := json.MarshalIndent(build(), "", "  ")
	if err != nil {
		return nil, fmt.Errorf("observability: marshal dashboard: %w", err)
	}
	return append(out, '\n'), nil
}

// Queries returns every PromQL expression of the dashboard: panel targets and variable queries.
func Queries() []string {
	var qs []string
	for _, r := range rows() {
		for _, s := range r.panels {
			for _, se := range s.series {
				qs = append(qs, se.expr)
			}
		}
	}
	return qs
}
