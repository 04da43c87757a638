package sidecar

import (
	"net/http"
	"strconv"
	"testing"
)

// TestDataParallelRankPerLeg: the prefill leg carries P's rank and the decode leg D's, each as
// X-Data-Parallel-Rank (the header vLLM reads); a client's own X-Data-Parallel-Rank never
// reaches a worker; without rank headers no leg gets one.
func TestDataParallelRankPerLeg(t *testing.T) {
	for _, tc := range []struct {
		spec                 string
		prefillRank, decRank string // "" = header not sent
		wantP, wantD         string // "" = no X-Data-Parallel-Rank on the leg
	}{
		{"both_ranked", "3", "1", "3", "1"},
		{"only_decode_ranked", "", "0", "", "0"},
		{"only_prefill_ranked", "2", "", "2", ""},
		{"none", "", "", "", ""},
		{"canonical_form", "007", "01", "7", "1"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			p := newWorker(t, prefillOK(pKV, 0))
			d := newWorker(t, decodeSSE(nil))
			h := newHarness(t, testConfig(), p.addr, d.addr)
			hdr := routeHeaders(p, d)
			hdr[HeaderDPRank] = "9" // the client's: must not pass
			if tc.prefillRank != "" {
				hdr[HeaderPrefillRank] = tc.prefillRank
			}
			if tc.decRank != "" {
				hdr[HeaderDecodeRank] = tc.decRank
			}
			resp, body := h.do("POST", "/v1/chat/completions", chatBody, hdr)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d %s", resp.StatusCode, body)
			}
			pl, dl := p.next(t), d.next(t)
			if got := pl.header.Values(HeaderDPRank); !oneOrNone(got, tc.wantP) {
				t.Errorf("prefill leg X-Data-Parallel-Rank %v, want %q", got, tc.wantP)
			}
			if got := dl.header.Values(HeaderDPRank); !oneOrNone(got, tc.wantD) {
				t.Errorf("decode leg X-Data-Parallel-Rank %v, want %q", got, tc.wantD)
			}
		})
	}
}

// TestDataParallelRankPassthrough: a request without a prefill host goes to D with D's rank.
func TestDataParallelRankPassthrough(t *testing.T) {
	d := newWorker(t, decodeJSON)
	h := newHarness(t, testConfig(), d.addr)
	resp, body := h.do("POST", "/v1/completions", `{"prompt":"hi"}`, map[string]string{HeaderDecodeHost: d.addr, HeaderDecodeRank: "1"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d %s", resp.StatusCode, body)
	}
	if got := d.next(t).header.Values(HeaderDPRank); !oneOrNone(got, "1") {
		t.Fatalf("passthrough X-Data-Parallel-Rank %v, want 1", got)
	}
}

func TestDataParallelRankInvalid(t *testing.T) {
	for _, v := range []string{"-1", "x", "65536", "1.0", "", " ", "+1", "123456"} {
		d := newWorker(t, decodeJSON)
		h := newHarness(t, testConfig(), d.addr)
		resp, body := h.do("POST", "/v1/completions", `{"prompt":"hi"}`, map[string]string{HeaderDecodeHost: d.addr, HeaderDecodeRank: v})
		wantError(t, resp, body, http.StatusBadRequest, "invalid_rank")
		if n := d.count(); n != 0 {
			t.Fatalf("rank %q: the worker got %d requests", v, n)
		}
	}
}

func oneOrNone(got []string, want string) bool {
	if want == "" {
		return len(got) == 0
	}
	return len(got) == 1 && got[0] == want
}

func FuzzParseRank(f *testing.F) {
	for _, s := range []string{"0", "1", "007", "65535", "65536", "-1", "x", "", " 3 ", "1,2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{}
		h.Set(HeaderDecodeRank, v)
		got, e := parseRank(h, HeaderDecodeRank)
		if e != nil {
			if e.status != http.StatusBadRequest || e.code != "invalid_rank" {
				t.Fatalf("parseRank(%q): %+v", v, e)
			}
			return
		}
		n, err := strconv.Atoi(got)
		if err != nil || n < 0 || n > maxRank || strconv.Itoa(n) != got {
			t.Fatalf("parseRank(%q) = %q, not a canonical rank", v, got)
		}
	})
}
