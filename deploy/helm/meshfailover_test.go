package helm

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	istiov1 "istio.io/client-go/pkg/apis/networking/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"
)

// failover is what a gateway's Envoy does about a dead router replica: eject it after failures
// local-origin failures in a row (swept every interval, out for ejection times the number of
// ejections, never beyond maxPercent of the hosts), and replay a stream reset before any answer
// retries times after a jittered back-off.
type failover struct {
	failures, maxPercent, retries float64
	interval, ejection            time.Duration
	backOffBase, backOffMax       time.Duration
	retryOn                       string
}

func mustDuration(t *testing.T, v any) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(fmt.Sprint(v))
	if err != nil {
		t.Fatalf("duration %v: %v", v, err)
	}
	return d
}

// chartEnvoyFailover reads the settings the chart's own Envoy renders for several replicas from
// its bootstrap (outlier detection of the condisagg cluster, retry policy of the ext_proc gRPC
// service), and returns them with the retry policy as rendered.
func chartEnvoyFailover(t *testing.T) (failover, map[string]any) {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(bootstrapOf(t, render(t, variantNamed(t, "plain_envoy")), release)), &doc); err != nil {
		t.Fatal(err)
	}
	var od, rp map[string]any
	for _, c := range dig(t, doc, "static_resources", "clusters").([]any) {
		if dig(t, c, "name") == "condisagg" {
			od = dig(t, c, "outlier_detection").(map[string]any)
		}
	}
	hcm := dig(t, doc, "static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config")
	for _, f := range dig(t, hcm, "http_filters").([]any) {
		if dig(t, f, "name") == "envoy.filters.http.ext_proc" {
			rp = dig(t, f, "typed_config", "grpc_service", "retry_policy").(map[string]any)
		}
	}
	if od == nil || rp == nil {
		t.Fatalf("chart Envoy bootstrap: outlier_detection %v, retry_policy %v", od, rp)
	}
	if od["split_external_local_origin_errors"] != true {
		t.Fatalf("chart Envoy outlier_detection %v does not split local-origin errors", od)
	}
	if _, ok := od["interval"]; ok {
		t.Fatalf("chart Envoy sets outlier_detection.interval %v; the chart's default assumes Envoy's 10s", od["interval"])
	}
	return failover{
		failures: od["consecutive_local_origin_failure"].(float64), maxPercent: od["max_ejection_percent"].(float64),
		interval: 10 * time.Second, ejection: mustDuration(t, od["base_ejection_time"]),
		retries: rp["num_retries"].(float64), retryOn: rp["retry_on"].(string),
		backOffBase: mustDuration(t, dig(t, rp, "retry_back_off", "base_interval")),
		backOffMax:  mustDuration(t, dig(t, rp, "retry_back_off", "max_interval")),
	}, rp
}

// istioExtProcPatch returns the typed_config of the EnvoyFilter's ext_proc filter.
func istioExtProcPatch(t *testing.T, objs []object) map[string]any {
	t.Helper()
	for _, p := range dig(t, find(t, objs, "EnvoyFilter", release).Doc, "spec", "configPatches").([]any) {
		if v, ok := dig(t, p, "patch", "value").(map[string]any); ok && v["name"] == "envoy.filters.http.ext_proc" {
			return v["typed_config"].(map[string]any)
		}
	}
	t.Fatal("EnvoyFilter has no ext_proc filter")
	return nil
}

// checkIstioFailover: a DestinationRule in the Service's namespace for exactly the host of the
// ext_proc filter's outbound cluster (Istio's cluster of the condisagg Service at the ext_proc
// port) carries want's outlier detection, and the ext_proc gRPC service want's retry policy
// (none when want.retries is 0).
func checkIstioFailover(t *testing.T, objs []object, want failover, wantRP map[string]any) {
	t.Helper()
	ext := istioExtProcPatch(t, objs)
	cluster := dig(t, ext, "grpc_service", "envoy_grpc", "cluster_name").(string)
	host := fmt.Sprintf("%s.%s.svc.cluster.local", release, namespace)
	if wantCluster := fmt.Sprintf("outbound|%d||%s", servicePorts(t, objs)["grpc-extproc"].Port, host); cluster != wantCluster {
		t.Fatalf("ext_proc cluster %s; want %s", cluster, wantCluster)
	}
	dr := decodeAs[*istiov1.DestinationRule](t, find(t, objs, "DestinationRule", release))
	if dr.Namespace != namespace || dr.Spec.Host != host {
		t.Errorf("DestinationRule %s/%s host %q; want %s/%s host %q (the ext_proc cluster's)", dr.Namespace, dr.Name, dr.Spec.Host, namespace, release, host)
	}
	tp := dr.Spec.GetTrafficPolicy()
	if tp.GetTls() != nil || tp.GetConnectionPool() != nil || tp.GetLoadBalancer() != nil || len(tp.GetPortLevelSettings()) > 0 || len(dr.Spec.GetSubsets()) > 0 {
		t.Errorf("DestinationRule trafficPolicy %v; want outlier detection only (auto mTLS and Istio's pool kept)", tp)
	}
	od := tp.GetOutlierDetection()
	if od == nil {
		t.Fatal("DestinationRule has no outlierDetection")
	}
	got := failover{failures: float64(od.GetConsecutiveLocalOriginFailures().GetValue()), maxPercent: float64(od.GetMaxEjectionPercent()),
		interval: od.GetInterval().AsDuration(), ejection: od.GetBaseEjectionTime().AsDuration()}
	wantOD := failover{failures: want.failures, maxPercent: want.maxPercent, interval: want.interval, ejection: want.ejection}
	if !od.GetSplitExternalLocalOriginErrors() || got != wantOD {
		t.Errorf("DestinationRule outlierDetection split %v %+v; want split and %+v", od.GetSplitExternalLocalOriginErrors(), got, wantOD)
	}
	// Istio sets the panic threshold to minHealthPercent (0): the last replica must never be
	// ejected, which Envoy guarantees for any maxEjectionPercent under 100.
	if od.GetMinHealthPercent() != 0 || od.GetMaxEjectionPercent() >= 100 || od.GetConsecutive_5XxErrors() != nil || od.GetConsecutiveGatewayErrors() != nil {
		t.Errorf("DestinationRule outlierDetection %v: minHealthPercent, 5xx and gateway errors must stay Istio's defaults, maxEjectionPercent under 100", od)
	}

	rp, ok := dig(t, ext, "grpc_service").(map[string]any)["retry_policy"]
	if want.retries == 0 {
		if ok {
			t.Errorf("ext_proc retry_policy %v; want none", rp)
		}
		return
	}
	if !ok {
		t.Fatal("EnvoyFilter ext_proc grpc_service has no retry_policy")
	}
	if wantRP != nil && !reflect.DeepEqual(rp, wantRP) {
		t.Errorf("ext_proc retry_policy %v; want the chart Envoy's %v", rp, wantRP)
	}
	gotRetry := failover{retries: dig(t, rp, "num_retries").(float64), retryOn: dig(t, rp, "retry_on").(string),
		backOffBase: mustDuration(t, dig(t, rp, "retry_back_off", "base_interval")), backOffMax: mustDuration(t, dig(t, rp, "retry_back_off", "max_interval"))}
	wantRetry := failover{retries: want.retries, retryOn: want.retryOn, backOffBase: want.backOffBase, backOffMax: want.backOffMax}
	if gotRetry != wantRetry || dig(t, rp, "retry_host_predicate", 0, "name") != "envoy.retry_host_predicates.previous_hosts" {
		t.Errorf("ext_proc retry_policy %v; want %+v on another host (previous_hosts)", rp, wantRetry)
	}
}

// gatewayAPIDuration is the pattern of Gateway API's Duration (gwapiv1.Duration), which the CRD
// checks and the Go type does not.
var gatewayAPIDuration = regexp.MustCompile(`^([0-9]{1,5}(h|m|s|ms)){1,4}$`)

func egDuration(t *testing.T, field string, d *gatewayv1.Duration) time.Duration {
	t.Helper()
	if d == nil {
		t.Fatalf("%s is not set", field)
	}
	if !gatewayAPIDuration.MatchString(string(*d)) {
		t.Errorf("%s %q is not a Gateway API duration", field, *d)
	}
	return mustDuration(t, *d)
}

// checkEGCircuitBreaker: the ext_proc cluster's limits are the routes' (10,000 connections,
// pending and parallel requests) and allow as many retries, not Envoy's default 1,024 requests
// and 3 retries in flight: every request holds one ext_proc stream.
func checkEGCircuitBreaker(t *testing.T, cb *egv1a1.CircuitBreaker) {
	t.Helper()
	if cb == nil {
		t.Fatal("extProc backendSettings without a circuitBreaker: Envoy's defaults cap the gateway at 1,024 requests in flight")
	}
	for name, v := range map[string]*int64{"maxConnections": cb.MaxConnections, "maxPendingRequests": cb.MaxPendingRequests,
		"maxParallelRequests": cb.MaxParallelRequests, "maxParallelRetries": cb.MaxParallelRetries} {
		if v == nil || *v != 10000 {
			t.Errorf("extProc circuitBreaker.%s %v; want 10000", name, v)
		}
	}
}

// checkEGFailover: the EnvoyExtensionPolicy's extProc entry, whose backend is the condisagg
// Service's ext_proc port, carries want as backendSettings: a passive health check splitting
// local-origin errors and a retry (none when want.retries is 0), beside the circuit breaker,
// nothing else.
func checkEGFailover(t *testing.T, objs []object, want failover) {
	t.Helper()
	eep := decodeAs[*egv1a1.EnvoyExtensionPolicy](t, find(t, objs, "EnvoyExtensionPolicy", release))
	if len(eep.Spec.ExtProc) != 1 || len(eep.Spec.ExtProc[0].BackendRefs) != 1 {
		t.Fatalf("extProc %+v; want one entry with one backend", eep.Spec.ExtProc)
	}
	e := eep.Spec.ExtProc[0]
	if be := e.BackendRefs[0]; be.Name != release || be.Port == nil || int32(*be.Port) != servicePorts(t, objs)["grpc-extproc"].Port {
		t.Errorf("extProc backend %s:%v; want the Service %s at its ext_proc port", be.Name, be.Port, release)
	}
	bs := e.BackendSettings
	if bs == nil || bs.HealthCheck == nil || bs.HealthCheck.Passive == nil {
		t.Fatalf("extProc backendSettings %+v; want a passive health check", bs)
	}
	if bs.HealthCheck.Active != nil || bs.HealthCheck.PanicThreshold != nil || bs.LoadBalancer != nil || bs.Timeout != nil {
		t.Errorf("extProc backendSettings %+v; want the circuit breaker, the passive health check and the retry only", bs)
	}
	checkEGCircuitBreaker(t, bs.CircuitBreaker)
	p := bs.HealthCheck.Passive
	if p.SplitExternalLocalOriginErrors == nil || !*p.SplitExternalLocalOriginErrors || p.ConsecutiveLocalOriginFailures == nil || p.MaxEjectionPercent == nil {
		t.Fatalf("passive health check %+v; want split local-origin errors, their count and maxEjectionPercent", p)
	}
	// AlwaysEjectOneEndpoint would eject the last replica too.
	if p.AlwaysEjectOneEndpoint != nil || p.Consecutive5xxErrors != nil || p.ConsecutiveGatewayErrors != nil || p.FailurePercentageThreshold != nil {
		t.Errorf("passive health check %+v sets more than the local-origin ejection", p)
	}
	got := failover{failures: float64(*p.ConsecutiveLocalOriginFailures), maxPercent: float64(*p.MaxEjectionPercent),
		interval: egDuration(t, "passive.interval", p.Interval), ejection: egDuration(t, "passive.baseEjectionTime", p.BaseEjectionTime)}
	wantOD := failover{failures: want.failures, maxPercent: want.maxPercent, interval: want.interval, ejection: want.ejection}
	if got != wantOD {
		t.Errorf("passive health check %+v; want %+v", got, wantOD)
	}

	if want.retries == 0 {
		if bs.Retry != nil {
			t.Errorf("extProc retry %+v; want none", bs.Retry)
		}
		return
	}
	r := bs.Retry
	if r == nil || r.NumRetries == nil || r.RetryOn == nil || r.PerRetry == nil || r.PerRetry.BackOff == nil {
		t.Fatalf("extProc retry %+v; want retries, triggers and a back-off", r)
	}
	var on []string
	for _, tr := range r.RetryOn.Triggers {
		on = append(on, string(tr))
	}
	// Envoy Gateway translates a back-off only with both intervals set.
	gotRetry := failover{retries: float64(*r.NumRetries), retryOn: strings.Join(on, ","),
		backOffBase: egDuration(t, "retry backOff.baseInterval", r.PerRetry.BackOff.BaseInterval),
		backOffMax:  egDuration(t, "retry backOff.maxInterval", r.PerRetry.BackOff.MaxInterval)}
	wantRetry := failover{retries: want.retries, retryOn: want.retryOn, backOffBase: want.backOffBase, backOffMax: want.backOffMax}
	if gotRetry != wantRetry || len(r.RetryOn.HTTPStatusCodes) > 0 || r.PerRetry.Timeout != nil {
		t.Errorf("extProc retry %+v; want %+v", gotRetry, wantRetry)
	}
}

// TestChartMeshFailover: with Istio and Envoy Gateway the gateway's Envoy fails over between
// router replicas as the chart's own Envoy does. By default both render exactly the numbers the
// chart's Envoy bootstrap carries (ejection at the first local-origin failure, never half the
// replicas, one replay of an unanswered stream); gateway.extProcFailover reaches both, retries 0
// drops the replay only, enabled false drops both.
func TestChartMeshFailover(t *testing.T) {
	defaults, envoyRP := chartEnvoyFailover(t)
	custom := failover{failures: 2, maxPercent: 34, retries: 2, interval: 5 * time.Second, ejection: time.Minute,
		backOffBase: 10 * time.Millisecond, backOffMax: 1500 * time.Millisecond, retryOn: defaults.retryOn}
	customSet := []string{"gateway.extProcFailover.consecutiveLocalOriginFailures=2", "gateway.extProcFailover.maxEjectionPercent=34",
		"gateway.extProcFailover.retries=2", "gateway.extProcFailover.interval=5s", "gateway.extProcFailover.baseEjectionTime=60s",
		"gateway.extProcFailover.retryBackOff.baseInterval=10ms", "gateway.extProcFailover.retryBackOff.maxInterval=1500ms"}
	noRetry := defaults
	noRetry.retries = 0
	for _, tc := range []struct {
		name string
		set  []string
		want failover
		rp   map[string]any // the exact retry_policy the EnvoyFilter must carry, when known
	}{
		{"defaults", nil, defaults, envoyRP},
		{"values", customSet, custom, nil},
		{"no_retries", []string{"gateway.extProcFailover.retries=0"}, noRetry, nil},
	} {
		t.Run("istio_"+tc.name, func(t *testing.T) {
			t.Parallel()
			checkIstioFailover(t, render(t, variant{values: []string{"common.yaml", "istio.yaml"}, set: tc.set}), tc.want, tc.rp)
		})
		t.Run("envoy_gateway_"+tc.name, func(t *testing.T) {
			t.Parallel()
			checkEGFailover(t, render(t, variant{values: []string{"common.yaml", "envoy-gateway.yaml"}, set: tc.set}), tc.want)
		})
	}
	t.Run("disabled", func(t *testing.T) {
		t.Parallel()
		off := []string{"gateway.extProcFailover.enabled=false"}
		istio := render(t, variant{values: []string{"common.yaml", "istio.yaml"}, set: off})
		for _, o := range istio {
			if o.Kind == "DestinationRule" {
				t.Errorf("DestinationRule %s rendered although disabled", o.Name)
			}
		}
		if rp, ok := dig(t, istioExtProcPatch(t, istio), "grpc_service").(map[string]any)["retry_policy"]; ok {
			t.Errorf("ext_proc retry_policy %v rendered although disabled", rp)
		}
		eg := render(t, variant{values: []string{"common.yaml", "envoy-gateway.yaml"}, set: off})
		eep := decodeAs[*egv1a1.EnvoyExtensionPolicy](t, find(t, eg, "EnvoyExtensionPolicy", release))
		if bs := eep.Spec.ExtProc[0].BackendSettings; bs == nil || bs.HealthCheck != nil || bs.Retry != nil {
			t.Errorf("extProc backendSettings %+v; want the circuit breaker only (no ejection, no retry) when disabled", bs)
		} else {
			checkEGCircuitBreaker(t, bs.CircuitBreaker)
		}
	})
	// The values' defaults are documented as the chart Envoy's: a changed bootstrap must move them.
	t.Run("defaults_are_the_chart_envoys", func(t *testing.T) {
		t.Parallel()
		if !slices.Equal(strings.Split(defaults.retryOn, ","), []string{"reset", "connect-failure", "refused-stream"}) {
			t.Errorf("chart Envoy retry_on %q; the templates render reset,connect-failure,refused-stream", defaults.retryOn)
		}
	})
}
