package extproc

import (
	"slices"
	"testing"

	"github.com/condisagg/condisagg/policy"
	"github.com/condisagg/condisagg/pool"
	"github.com/condisagg/condisagg/route"
)

// TestRankHeaders checks the header contract for data-parallel ranks (docs/header-contract in
// extproc/README.md): a worker of a server with more than one rank is named by its rank, to
// vLLM (x-data-parallel-rank, decode route only) and to pd-sidecar (x-condisagg-*-rank).
func TestRankHeaders(t *testing.T) {
	plain := route.Worker{ID: "d", Endpoint: "10.0.0.21:8000"}
	d1 := route.Worker{ID: "d/dp1", Endpoint: "10.0.0.21:8000", DPRank: 1, DPSize: 2}
	d0 := route.Worker{ID: "d", Endpoint: "10.0.0.21:8000", DPRank: 0, DPSize: 2}
	p3 := route.Worker{ID: "p/dp3", Endpoint: "10.0.0.11:8000", DPRank: 3, DPSize: 4}
	pPlain := route.Worker{ID: "p", Endpoint: "10.0.0.11:8000"}
	absent := "<absent>"
	for _, c := range []struct {
		spec                     string
		route                    policy.Route
		decode, prefill          route.Worker
		dpRank, decRank, preRank string
	}{
		{"no_data_parallelism_no_rank_headers", policy.RouteDecode, plain, route.Worker{}, absent, absent, absent},
		{"decode_route_names_the_decode_rank", policy.RouteDecode, d1, route.Worker{}, "1", "1", absent},
		{"rank_0_of_a_dp_server_is_named_too", policy.RouteDecode, d0, route.Worker{}, "0", "0", absent},
		{"remote_route_ranks_go_to_the_sidecar_only", policy.RoutePrefill, d1, p3, absent, "1", "3"},
		{"remote_route_plain_prefill", policy.RoutePrefill, d0, pPlain, absent, "0", absent},
		{"remote_route_plain_decode", policy.RoutePrefill, plain, p3, absent, absent, "3"},
	} {
		t.Run(c.spec, func(t *testing.T) {
			out := &route.Outcome{Route: c.route, Decode: c.decode, Prefill: c.prefill}
			resp := decisionResponse(phaseRequestHeaders, &Settings{}, out, stripHeaders[:], nil, false)
			common := resp.GetRequestHeaders().GetResponse()
			h := setHeaders(common)
			get := func(k string) string {
				if v, ok := h[k]; ok {
					return v
				}
				return absent
			}
			if got := get(HeaderDPRank); got != c.dpRank {
				t.Errorf("%s = %s, want %s", HeaderDPRank, got, c.dpRank)
			}
			if got := get(HeaderDecodeRank); got != c.decRank {
				t.Errorf("%s = %s, want %s", HeaderDecodeRank, got, c.decRank)
			}
			if got := get(HeaderPrefillRank); got != c.preRank {
				t.Errorf("%s = %s, want %s", HeaderPrefillRank, got, c.preRank)
			}
			// A client can never choose a rank: the client's copies are removed first.
			for _, k := range []string{HeaderDPRank, HeaderDecodeRank, HeaderPrefillRank} {
				if !slices.Contains(common.GetHeaderMutation().GetRemoveHeaders(), k) {
					t.Errorf("%s is not stripped", k)
				}
			}
		})
	}
}

// TestRankRoutedThroughServer: through the real router and pool, a decode server with two
// ranks gets requests pinned to the booked rank.
func TestRankRoutedThroughServer(t *testing.T) {
	// No prefill pool: every request takes the decode route.
	e := newEnv(t, envOptions{workers: []pool.WorkerConfig{
		{Name: "decode-0", Role: pool.RoleDecode, Endpoint: d0Addr, NumGPUBlocks: 40000, DataParallelSize: 2},
	}, disagg: func(c *policy.Config) { c.DistinctPools, c.Enabled = false, false }})
	// Each request is decided while the one before it is still open, so the ranks' loads
	// differ and the next request must take the other rank: both ranks are selectable units,
	// and each open stream keeps its booking on its own rank's worker.
	open := func() (*envoy, string) {
		v := e.open(buffered, streamed)
		v.requestHeaders(false, ":method", "POST", ":path", chatPath, HeaderDPRank, "7")
		v.recv()
		v.requestBody(chatBody("hello", false), true)
		h := setHeaders(v.recv().GetRequestBody().GetResponse())
		rank := h[HeaderDPRank]
		if rank != "0" && rank != "1" || h[HeaderDecodeRank] != rank || h[HeaderDecodeHost] != d0Addr {
			t.Fatalf("headers %v: want rank 0 or 1 on %s", h, d0Addr)
		}
		return v, rank
	}
	rankWorker := func(rank string) string {
		if rank == "1" {
			return pool.RankID("decode-0", 1)
		}
		return "decode-0"
	}
	prev, prevRank := open()
	for i := range 6 {
		next, rank := open()
		if rank == prevRank {
			t.Fatalf("request %d: rank %s chosen while the previous request holds it and the other rank is idle (%+v)", i+1, rank, e.booked())
		}
		if got := e.booked()[rankWorker(rank)].ActiveRequests; got != 1 {
			t.Fatalf("rank %s: worker %s has %d open bookings, want 1 (%+v)", rank, rankWorker(rank), got, e.booked())
		}
		prev.closeAndDrain()
		prev, prevRank = next, rank
	}
	prev.closeAndDrain()
}
