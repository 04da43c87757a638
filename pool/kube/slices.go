package kube

import (
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/condisagg/condisagg/pool"
)

// Reasons of skipped slices and endpoints (the reason label of condisagg_discovery_errors_total).
const (
	ReasonMissingPort     = "missing_port"             // the slice has no TCP port of the entry's name (or no number)
	ReasonAddressType     = "unsupported_address_type" // FQDN slices: a worker needs an IP
	ReasonNoAddress       = "no_address"               // an endpoint without addresses
	ReasonBadAddress      = "bad_address"              // an address that is not an IP of the slice's type
	ReasonRejected        = "rejected"                 // the pool refused the member (pool.SetMembers)
	ReasonWatch           = "watch"                    // a failed list or watch of the API server
	ReasonPortRangeEvents = "event_port_range"         // kv event port + data_parallel_size-1 beyond 65535
)

// Skip is one slice or endpoint an entry could not turn into a worker.
type Skip struct {
	Slice  string // namespace/name
	Reason string
}

// Members turns the EndpointSlices that entry e selects into pool members (pure: no I/O).
// Rules, one table case each in slices_test.go:
//
//	S1 a ready endpoint of a slice with the entry's named TCP port is one server:
//	   id "<name>@<ip>:<port>", endpoint ip:port, events tcp://ip:<kv_events_port>.
//	S2 ready unset counts as ready (the API: nil means unknown, to be read as ready).
//	S3 an endpoint with ready false is left out (not a problem: it is starting or failing).
//	S4 a terminating endpoint is left out even when ready (publishNotReadyAddresses).
//	S5 a slice without the named port, kv_events_port or kv_replay_port (or with no number
//	   for it) is skipped whole: missing_port.
//	S6 an FQDN slice is skipped: unsupported_address_type.
//	S7 an endpoint without addresses is skipped: no_address; only the first address is used
//	   (the API makes them fungible).
//	S8 an address that is not an IP of the slice's type is skipped: bad_address.
//	S9 IPv6 addresses are bracketed: "<name>@[ip]:port", tcp://[ip]:port.
//	S10 one address in several slices (a Service's slices while they are rebalanced) is one
//	   server, present when any copy is ready and not terminating.
//	S11 the result is sorted by id, whatever the order of the slices.
//	S12 event ports whose data-parallel range passes 65535 skip the slice: event_port_range.
func Members(e Entry, list []*discoveryv1.EndpointSlice) ([]pool.Member, []Skip) {
	e = Config{Workers: []Entry{e}}.WithDefaults().Workers[0]
	byEP := map[string]pool.Member{}
	ready := map[string]bool{}
	var skips []Skip
	for _, sl := range list {
		if sl == nil {
			continue
		}
		name := sl.Namespace + "/" + sl.Name
		ports, reason := slicePorts(e, sl)
		if reason != "" {
			skips = append(skips, Skip{name, reason})
			continue
		}
		for _, ep := range sl.Endpoints {
			ip, reason := endpointIP(sl.AddressType, ep)
			if reason != "" {
				skips = append(skips, Skip{name, reason})
				continue
			}
			m := member(e, ip, ports)
			ok := (ep.Conditions.Ready == nil || *ep.Conditions.Ready) &&
				(ep.Conditions.Terminating == nil || !*ep.Conditions.Terminating)
			byEP[m.Worker.Endpoint] = m
			ready[m.Worker.Endpoint] = ready[m.Worker.Endpoint] || ok
		}
	}
	var out []pool.Member
	for ep, m := range byEP {
		if ready[ep] {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b pool.Member) int { return strings.Compare(a.ID, b.ID) })
	return out, skips
}

// servicePorts are the port numbers of one slice for an entry (0 = not configured).
type servicePorts struct{ http, events, replay int32 }

// slicePorts finds the entry's named ports in the slice (S5, S6, S12).
func slicePorts(e Entry, sl *discoveryv1.EndpointSlice) (servicePorts, string) {
	if sl.AddressType != discoveryv1.AddressTypeIPv4 && sl.AddressType != discoveryv1.AddressTypeIPv6 {
		return servicePorts{}, ReasonAddressType
	}
	var ps servicePorts
	for _, want := range []struct {
		name string
		dst  *int32
	}{{e.Port, &ps.http}, {e.KVEventsPort, &ps.events}, {e.KVReplayPort, &ps.replay}} {
		if want.name == "" {
			continue
		}
		*want.dst = findPort(sl.Ports, want.name)
		if *want.dst == 0 {
			return servicePorts{}, ReasonMissingPort
		}
	}
	n := int32(max(e.DataParallelSize, 1))
	if ps.events+n-1 > 65535 || ps.replay+n-1 > 65535 {
		return servicePorts{}, ReasonPortRangeEvents
	}
	return ps, ""
}

// findPort is the number of the TCP port named name, 0 if there is none.
func findPort(ports []discoveryv1.EndpointPort, name string) int32 {
	for _, p := range ports {
		if p.Name == nil || *p.Name != name || p.Port == nil {
			continue
		}
		if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
			continue
		}
		if *p.Port > 0 && *p.Port <= 65535 {
			return *p.Port
		}
	}
	return 0
}

// endpointIP is the endpoint's first address, checked against the slice's type (S7, S8).
func endpointIP(typ discoveryv1.AddressType, ep discoveryv1.Endpoint) (netip.Addr, string) {
	if len(ep.Addresses) == 0 {
		return netip.Addr{}, ReasonNoAddress
	}
	ip, err := netip.ParseAddr(ep.Addresses[0])
	if err != nil || ip.Zone() != "" || (typ == discoveryv1.AddressTypeIPv4) != ip.Is4() {
		return netip.Addr{}, ReasonBadAddress
	}
	return ip, ""
}

// member is the server at ip with the entry's settings (S1, S9).
func member(e Entry, ip netip.Addr, ps servicePorts) pool.Member {
	hp := func(port int32) string { return net.JoinHostPort(ip.String(), strconv.Itoa(int(port))) }
	w := pool.WorkerConfig{Name: e.Name, Role: e.Role, Endpoint: hp(ps.http), DataParallelSize: e.DataParallelSize,
		NumGPUBlocks: e.NumGPUBlocks, MaxNumBatchedTokens: e.MaxNumBatchedTokens}
	if ps.events > 0 {
		w.KVEvents = "tcp://" + hp(ps.events)
	}
	if ps.replay > 0 {
		w.KVReplay = "tcp://" + hp(ps.replay)
	}
	return pool.Member{ID: e.Name + "@" + w.Endpoint, Worker: w}
}
