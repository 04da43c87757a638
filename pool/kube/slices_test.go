package kube

import (
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/condisagg/condisagg/pool"
)

// slice builds an EndpointSlice of type typ with the named TCP ports ("name=port") and endpoints.
func slice(name string, typ discoveryv1.AddressType, ports []string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: name,
		Labels: map[string]string{"kubernetes.io/service-name": "vllm-decode"}}, AddressType: typ, Endpoints: eps}
	for _, p := range ports {
		var n string
		var port int32
		if _, err := fmt.Sscanf(p, "%s %d", &n, &port); err != nil {
			panic(p)
		}
		sl.Ports = append(sl.Ports, discoveryv1.EndpointPort{Name: ptr.To(n), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)})
	}
	return sl
}

// ep is an endpoint; ready and terminating nil when given as nil.
func ep(addr string, ready, terminating *bool) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Conditions: discoveryv1.EndpointConditions{Ready: ready, Terminating: terminating}}
	if addr != "" {
		e.Addresses = []string{addr}
	}
	return e
}

var (
	yes, no = ptr.To(true), ptr.To(false)
	v4, v6  = discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6
	allPort = []string{"http 8000", "kv-events 5557", "kv-replay 5567"}
)

func decodeEntry() Entry {
	return Entry{Name: "decode", Role: pool.RoleDecode, Selector: "kubernetes.io/service-name=vllm-decode",
		KVEventsPort: "kv-events", KVReplayPort: "kv-replay", NumGPUBlocks: 1000}
}

// m is the member decodeEntry makes of host (an IP, bracketed if IPv6) with all three ports.
func m(host string) pool.Member {
	return pool.Member{ID: "decode@" + host + ":8000", Worker: pool.WorkerConfig{Name: "decode", Role: pool.RoleDecode,
		Endpoint: host + ":8000", KVEvents: "tcp://" + host + ":5557", KVReplay: "tcp://" + host + ":5567", NumGPUBlocks: 1000}}
}

// TestMembers: one case per rule of Members' doc comment (spec S1-S12).
func TestMembers(t *testing.T) {
	dp := decodeEntry()
	dp.DataParallelSize = 8
	noEvents := decodeEntry()
	noEvents.KVEventsPort, noEvents.KVReplayPort = "", ""
	tests := []struct {
		name   string
		spec   string
		entry  Entry
		slices []*discoveryv1.EndpointSlice
		want   []pool.Member
		skips  []Skip
	}{
		{"ready_endpoint_is_a_server", "S1", decodeEntry(), []*discoveryv1.EndpointSlice{
			slice("a", v4, allPort, ep("10.0.0.1", yes, no))}, []pool.Member{m("10.0.0.1")}, nil},
		{"without_event_ports_no_event_endpoints", "S1", noEvents, []*discoveryv1.EndpointSlice{
			slice("a", v4, []string{"http 8000"}, ep("10.0.0.1", yes, nil))},
			[]pool.Member{{ID: "decode@10.0.0.1:8000", Worker: pool.WorkerConfig{Name: "decode", Role: pool.RoleDecode,
				Endpoint: "10.0.0.1:8000", NumGPUBlocks: 1000}}}, nil},
		{"ready_unset_is_ready", "S2", decodeEntry(), []*discoveryv1.EndpointSlice{
			slice("a", v4, allPort, ep("10.0.0.1", nil, nil))}, []pool.Member{m("10.0.0.1")}, nil},
		{"not_ready_left_out", "S3", decodeEntry(), []*discoveryv1.EndpointSlice{
			slice("a", v4, allPort, ep("10.0.0.1", no, no), ep("10.0.0.2", yes, no))}, []pool.Member{m("10.0.0.2")}, nil},
		{"terminating_left_out_even_if_ready", "S4", decodeEntry(), []*discoveryv1.EndpointSlice{
			slice("a", v4, allPort, ep("10.0.0.1", yes, yes))}, nil, nil},
		{"missing_http_port_skips_slice", "S5", decodeEntry(), []*discoveryv1.EndpointSlice{
			slice("a", v4, []string{"metrics 8000", "kv-events 5557", "kv-replay 5567"}, ep("10.0.0.1", yes, no)),
			slice("b", v4, allPort, ep("10.0.0.2", yes, no))},
			[]pool.Member{m("10.0.0.2")}, []Skip{{"llm/a", ReasonMissingPort}}},
		{"missing_event_port_skips_slice", "S5", decodeEntry(), []*discoveryv1.EndpointSlice{
			slice("a", v4, []string{"http 8000", "kv-replay 5567"}, ep("10.0.0.1", yes, no))},
			nil, []Skip{{"llm/a", ReasonMissingPort}}},
		{"port_without_number_or_udp_skips_slice", "S5", noEvents, []*discoveryv1.EndpointSlice{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: "a"}, AddressType: v4,
				Ports:     []discoveryv1.EndpointPort{{Name: ptr.To("http")}, {Name: ptr.To("http"), Port: ptr.To[int32](8000), Protocol: ptr.To(corev1.ProtocolUDP)}},
				Endpoints: []discoveryv1.Endpoint{ep("10.0.0.1", yes, no)}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "llm", Name: "b"}, AddressType: v4, Endpoints: []discoveryv1.Endpoint{ep("10.0.0.2", yes, no)}}},
			nil, []Skip{{"llm/a", ReasonMissingPort}, {"llm/b", ReasonMissingPort}}},
		{"fqdn_slice_skipped", "S6", decodeEntry(), []*discoveryv1.EndpointSlice{
			slice("a", discoveryv1.AddressTypeFQDN, allPort, ep("vllm-0.llm.svc", yes, no))}, nil, []Skip{{"llm/a", ReasonAddressType}}},
		{"no_address_skipped_first_address_used", "S7", decodeEntry(), []*discoveryv1.EndpointSlice{
			slice("a", v4, allPort, ep("", yes, no),
				discoveryv1.Endpoint{Addresses: []string{"10.0.0.3", "10.0.0.4"}})},
			[]pool.Member{m("10.0.0.3")}, []Skip{{"llm/a", ReasonNoAddress}}},
		{"bad_address_skipped", "S8", decodeEntry(), []*discoveryv1.EndpointSlice{
			slice("a", v4, allPort, ep("not-an-ip", yes, no), ep("fd00::1", yes, no), ep("10.0.0.1", yes, no)),
			slice("b", v6, allPort, ep("10.0.0.9", yes, no), ep("fe80::1%eth0", yes, no))},
			[]pool.Member{m("10.0.0.1")}, []Skip{{"llm/a", ReasonBadAddress}, {"llm/a", ReasonBadAddress},
				{"llm/b", ReasonBadAddress}, {"llm/b", ReasonBadAddress}}},
		{"ipv6_bracketed", "S9", decodeEntry(), []*discoveryv1.EndpointSlice{
			slice("a", v6, allPort, ep("fd00:0:0::7", yes, no))}, []pool.Member{m("[fd00::7]")}, nil},
		{"duplicate_across_slices_is_one_ready_if_any_copy_is", "S10", decodeEntry(), []*discoveryv1.EndpointSlice{
			slice("a", v4, allPort, ep("10.0.0.1", no, no), ep("10.0.0.2", yes, yes)),
			slice("b", v4, allPort, ep("10.0.0.1", yes, no), ep("10.0.0.2", no, yes))},
			[]pool.Member{m("10.0.0.1")}, nil},
		{"sorted_by_id", "S11", decodeEntry(), []*discoveryv1.EndpointSlice{
			slice("b", v4, allPort, ep("10.0.0.9", yes, no), ep("10.0.0.10", yes, no)),
			slice("a", v4, allPort, ep("10.0.0.2", nil, nil)), nil},
			[]pool.Member{m("10.0.0.10"), m("10.0.0.2"), m("10.0.0.9")}, nil},
		{"event_port_range_past_65535_skips_slice", "S12", dp, []*discoveryv1.EndpointSlice{
			slice("a", v4, []string{"http 8000", "kv-events 65530", "kv-replay 5567"}, ep("10.0.0.1", yes, no))},
			nil, []Skip{{"llm/a", ReasonPortRangeEvents}}},
		{"no_slices", "S11", decodeEntry(), nil, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.spec+"_"+tc.name, func(t *testing.T) {
			got, skips := Members(tc.entry, tc.slices)
			if !reflect.DeepEqual(got, tc.want) || !reflect.DeepEqual(skips, tc.skips) {
				t.Errorf("Members (%s):\n got %+v\n     %+v\nwant %+v\n     %+v", tc.spec, got, skips, tc.want, tc.skips)
			}
		})
	}
}
