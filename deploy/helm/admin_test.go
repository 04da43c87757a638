package helm

import (
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/condisagg/condisagg/server/config"
)

func itoa32(n int32) string { return strconv.Itoa(int(n)) }

// servicePorts returns the condisagg Service's ports by name.
func servicePorts(t *testing.T, objs []object) map[string]corev1.ServicePort {
	t.Helper()
	v, err := decodeStrict(find(t, objs, "Service", release))
	if err != nil {
		t.Fatal(err)
	}
	ports := map[string]corev1.ServicePort{}
	for _, p := range v.(*corev1.Service).Spec.Ports {
		ports[p.Name] = p
	}
	return ports
}

// TestChartAdminGRPCExposure: by default the Admin gRPC service binds loopback and is in neither
// the container's ports nor the Service; admin.grpc.expose binds it off loopback, publishes it, and
// the token Secret is wired (server/config refuses that address without a token, checked below).
func TestChartAdminGRPCExposure(t *testing.T) {
	for _, expose := range []bool{false, true} {
		t.Run("expose="+strconv.FormatBool(expose), func(t *testing.T) {
			t.Parallel()
			v := variant{name: "admin", values: []string{"common.yaml"}, set: []string{"admin.grpc.expose=" + strconv.FormatBool(expose)}}
			objs := render(t, v)
			cfg, doc := loadServeConfig(t, objs)
			_, c := routerPod(t, objs)
			var inPod bool
			for _, p := range c.Ports {
				inPod = inPod || p.Name == "grpc-admin"
			}
			_, inService := servicePorts(t, objs)["grpc-admin"]
			loopback := strings.HasPrefix(cfg.AdminGRPCListen, "127.0.0.1:")
			if loopback == expose || inPod != expose || inService != expose {
				t.Errorf("admin_grpc_listen %s, container port %v, Service port %v; want off loopback and published = %v",
					cfg.AdminGRPCListen, inPod, inService, expose)
			}
			if cfg.Admin.Token == "" {
				t.Error("no admin token wired")
			}
			// Without the token the same config must be refused: the Secret is what makes it valid.
			delete(doc, "admin_token_file")
			if err := loadDoc(t, doc); err == nil || !strings.Contains(err.Error(), "admin_listen") {
				t.Errorf("config without admin_token_file: err = %v; want admin_listen refused off loopback", err)
			}
		})
	}
}

// loadDoc loads a serve config document through server/config.
func loadDoc(t *testing.T, doc map[string]any) error {
	t.Helper()
	out, err := yamlMarshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	f := config.NewFlags()
	if err := f.FS.Parse([]string{"--config", writeFile(t, t.TempDir(), "condisagg.yaml", string(out))}); err != nil {
		t.Fatal(err)
	}
	_, err = f.Load()
	return err
}

// TestChartExistingTokenSecret: admin.token.existingSecret is mounted instead of a generated one.
func TestChartExistingTokenSecret(t *testing.T) {
	objs := render(t, variant{values: []string{"common.yaml"}, set: []string{"admin.token.existingSecret=ops-token", "admin.token.secretKey=bearer"}})
	pod, c := routerPod(t, objs)
	text, _ := serveConfigText(t, objs, c)
	if !strings.Contains(text, "admin_token_file: /etc/condisagg-admin/bearer\n") {
		t.Errorf("serve config does not read the token from key bearer:\n%s", text)
	}
	vol := volumeAt(t, pod, c, "/etc/condisagg-admin/bearer")
	if vol.Secret == nil || vol.Secret.SecretName != "ops-token" {
		t.Errorf("token volume = %+v; want Secret ops-token", vol.VolumeSource)
	}
	for _, o := range objs {
		if o.Kind == "Secret" {
			t.Errorf("rendered Secret %s although admin.token.existingSecret is set", o.Name)
		}
	}
}

// TestChartRefusesBadValues: values the chart cannot deploy correctly, or does not know
// (values.schema.json forbids unknown keys), fail at render time.
func TestChartRefusesBadValues(t *testing.T) {
	cases := map[string]struct {
		set  []string
		want string
	}{
		// values.schema.json
		"replicas":             {[]string{"replicaCount=0"}, "/replicaCount"},
		"anti_affinity_preset": {[]string{"podAntiAffinityPreset=hard"}, "/podAntiAffinityPreset"},
		"bus_url_scheme":       {[]string{"bus.enabled=true", "bus.url=http://nats:4222"}, "/bus/url"},
		"router_pdb_both":      {[]string{"podDisruptionBudget.maxUnavailable=1"}, "podDisruptionBudget: minAvailable 1 and maxUnavailable 1 both set"},
		"router_pdb_blocks":    {[]string{"replicaCount=1"}, "podDisruptionBudget.minAvailable: 1 with 1 replicas blocks every node drain"},
		"envoy_pdb_blocks":     {[]string{"gateway.type=envoy", "gateway.envoy.replicaCount=1"}, "gateway.envoy.podDisruptionBudget.minAvailable: 1 with 1 replicas blocks every node drain"},
		"bus_no_url":           {[]string{"bus.enabled=true", "bus.nats.deploy=false"}, "bus.url: give your NATS server's URL"},
		"warm_not_exposed":     {[]string{"warmStart.enabled=true"}, "warmStart.enabled: a starting router copies the index over the Admin gRPC port of the Service; set admin.grpc.expose=true"},
		"config_replicas":      {[]string{"config.replicas.nats_url=nats://x:4222"}, "config.replicas: the chart sets it from bus.* and warmStart.*"},
		"misspelt_key":         {[]string{"gateway.istio.hostt=x"}, "additional properties 'hostt' not allowed"},
		"unknown_envoy_mode":   {[]string{"gateway.type=envoy", "gateway.envoy.mode=streamed"}, "/gateway/envoy/mode"},
		"unknown_gateway":      {[]string{"gateway.type=kgateway"}, "/gateway/type"},
		"pool_failure_mode":    {[]string{"gateway.type=inference-pool", "gateway.inferencePool.failureMode=Open"}, "/gateway/inferencePool/failureMode"},
		"pool_no_ports":        {[]string{"gateway.type=inference-pool", "gateway.inferencePool.targetPorts={}"}, "/gateway/inferencePool/targetPorts"},
		"env_misspelt":         {[]string{"env[0].name=GOMEMLIMIT", "env[0].vaule=3GiB"}, "additional properties 'vaule' not allowed"},
		"env_no_name":          {[]string{"env[0].value=3GiB"}, "at '/env/0': missing property 'name'"},
		"env_bad_name":         {[]string{"env[0].name=GO MEMLIMIT", "env[0].value=1"}, "/env/0/name"},
		"mount_misspelt":       {[]string{"extraVolumes[0].name=x", "extraVolumes[0].emptyDir.medium=Memory", "extraVolumeMounts[0].name=x", "extraVolumeMounts[0].mountpath=/x"}, "/extraVolumeMounts/0"},
		"volume_no_source":     {[]string{"extraVolumes[0].name=x"}, "/extraVolumes/0"},
		"init_no_image":        {[]string{"initContainers[0].name=fetch"}, "at '/initContainers/0': missing property 'image'"},
		"spread_bad_when":      {[]string{"topologySpreadConstraints[0].maxSkew=1", "topologySpreadConstraints[0].topologyKey=zone", "topologySpreadConstraints[0].whenUnsatisfiable=Never"}, "/topologySpreadConstraints/0/whenUnsatisfiable"},
		"spread_no_key":        {[]string{"topologySpreadConstraints[0].maxSkew=1", "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway"}, "missing property 'topologyKey'"},
		"priority_class":       {[]string{"priorityClassName=High_Priority"}, "/priorityClassName"},
		"envoy_priority_class": {[]string{"gateway.envoy.priorityClassName=High_Priority"}, "/gateway/envoy/priorityClassName"},
		"envoy_pdb_budget":     {[]string{"gateway.type=envoy", "gateway.envoy.podDisruptionBudget.maxUnavailable=half"}, "/gateway/envoy/podDisruptionBudget/maxUnavailable"},
		"router_pdb_budget":    {[]string{"podDisruptionBudget.minAvailable=null", "podDisruptionBudget.maxUnavailable=-1"}, "/podDisruptionBudget/maxUnavailable"},
		"roll_not_bool":        {[]string{"rollOnConfigChange=yes please"}, "/rollOnConfigChange"},
		"peerauth_no_ports":    {[]string{"gateway.istio.peerAuthentication.ports={}"}, "/gateway/istio/peerAuthentication/ports"},
		"failover_eject_all":   {[]string{"gateway.extProcFailover.maxEjectionPercent=100"}, "/gateway/extProcFailover/maxEjectionPercent"},
		"failover_minutes":     {[]string{"gateway.extProcFailover.baseEjectionTime=1m"}, "/gateway/extProcFailover/baseEjectionTime"},
		"failover_envoy_name":  {[]string{"gateway.extProcFailover.consecutiveLocalOriginFailure=1"}, "additional properties 'consecutiveLocalOriginFailure' not allowed"},
		// the templates' own checks
		"hub_without_prefix":   {[]string{"model.hub=Qwen/Qwen3-8B"}, `model.hub: "Qwen/Qwen3-8B" must be hf:<org>/<model>[@revision]`},
		"hub_token_no_hub":     {[]string{"model.hubToken.existingSecret=hf"}, "model.hubToken.existingSecret: only used with model.hub"},
		"no_tokenizer_source":  {[]string{"model.volume=null"}, "model.volume: give the volume holding the tokenizer directory (model.tokenizerPath), or fetch the tokenizer at start with model.hub"},
		"volume_named_model":   {[]string{"extraVolumes[0].name=model", "extraVolumes[0].emptyDir.medium=Memory"}, `extraVolumes[0].name: "model" is a volume of the chart`},
		"volume_twice":         {[]string{"extraVolumes[0].name=x", "extraVolumes[0].emptyDir.medium=Memory", "extraVolumes[1].name=x", "extraVolumes[1].emptyDir.medium=Memory"}, `extraVolumes[1].name: "x" is given twice`},
		"mount_of_no_volume":   {[]string{"extraVolumeMounts[0].name=ca", "extraVolumeMounts[0].mountPath=/etc/ssl/corp"}, `extraVolumeMounts[0].name: "ca" names no volume; add it to extraVolumes`},
		"mount_over_config":    {[]string{"extraVolumes[0].name=x", "extraVolumes[0].emptyDir.medium=Memory", "extraVolumeMounts[0].name=x", "extraVolumeMounts[0].mountPath=/etc/condisagg/"}, "extraVolumeMounts[0].mountPath: /etc/condisagg/ is where the chart mounts its own volume"},
		"mount_over_model":     {[]string{"extraVolumes[0].name=x", "extraVolumes[0].emptyDir.medium=Memory", "extraVolumeMounts[0].name=x", "extraVolumeMounts[0].mountPath=/models"}, "extraVolumeMounts[0].mountPath: /models is where the chart mounts"},
		"init_named_condisagg": {[]string{"initContainers[0].name=condisagg", "initContainers[0].image=busybox"}, "initContainers[0].name: condisagg is the router container's name"},
		"failover_chart_envoy": {[]string{"gateway.type=envoy", "gateway.extProcFailover.maxEjectionPercent=34"}, "gateway.extProcFailover: the chart's own Envoy (gateway.type envoy) keeps the ejection and replay settings of its bootstrap"},
		"failover_backoff":     {[]string{"gateway.type=envoy-gateway", "gateway.extProcFailover.retryBackOff.baseInterval=100ms"}, "gateway.extProcFailover.retryBackOff: maxInterval 50ms is below baseInterval 100ms"},
		"peerauth_no_selector": {[]string{"gateway.type=istio", "gateway.istio.peerAuthentication.enabled=true"}, "gateway.istio.peerAuthentication.selector: name the engine pods' labels"},
		"listen_in_config":     {[]string{"config.listen=0.0.0.0:1"}, "config.listen: the chart sets it"},
		"token_in_config":      {[]string{"config.admin_token_file=/x"}, "config.admin_token_file: the chart sets it"},
		"tokenizer":            {[]string{"config.model.tokenizer=/x"}, "config.model.tokenizer: the chart sets it"},
		"no_workers":           {[]string{"config.workers=null"}, "config.workers: list at least one"},
		"several_models":       {[]string{"config.models[0].name=a"}, "config.models: the chart serves one model"},
		"no_model_volume":      {[]string{"model.volume=null"}, "model.volume: give the volume"},
		// a worker whose port no pool endpoint has: the gateway could not dial what condisagg names
		"worker_outside_pool": {[]string{"gateway.type=inference-pool", "gateway.inferencePool.targetPorts={8000}"},
			"config.workers[prefill].endpoint: port 8100 is not in gateway.inferencePool.targetPorts [8000]"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := helmRun(t, variant{values: []string{"common.yaml"}, set: c.set}.args()...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v; want one containing %q", err, c.want)
			}
		})
	}
}
