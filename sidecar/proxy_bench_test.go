package sidecar

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkProxy measures one request over loopback: straight to the decode worker (the
// baseline), through the sidecar without a prefill host, and the full remote path (prefill
// leg + decode leg). The sidecar's overhead per request is the difference to "direct" (and,
// for remote, minus one extra worker round trip). Workers answer at once.
func BenchmarkProxy(b *testing.B) {
	pSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, prefillAnswerJSON(pKV, 16))
	}))
	defer pSrv.Close()
	dSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range sseEvents {
			_, _ = io.WriteString(w, ev)
		}
	}))
	defer dSrv.Close()
	pAddr, dAddr := pSrv.Listener.Addr().String(), dSrv.Listener.Addr().String()
	al, _ := NewAllowlist([]string{pAddr, dAddr})
	px, err := New(Config{}, al, Options{Metrics: NewMetrics(prometheus.NewRegistry())})
	if err != nil {
		b.Fatal(err)
	}
	defer px.Close()
	sSrv := httptest.NewServer(px)
	defer sSrv.Close()

	prompt := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("lorem ipsum ", 340) + `"}],"stream":true,"max_tokens":64}`
	cases := []struct {
		name, url string
		hdr       map[string]string
	}{
		{"path=direct", dSrv.URL, nil},
		{"path=passthrough", sSrv.URL, map[string]string{HeaderDecodeHost: dAddr}},
		{"path=remote", sSrv.URL, map[string]string{HeaderDecodeHost: dAddr, HeaderPrefillHost: pAddr}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			defer client.CloseIdleConnections()
			b.ReportAllocs()
			b.SetBytes(int64(len(prompt)))
			for b.Loop() {
				req, _ := http.NewRequest("POST", tc.url+"/v1/chat/completions", strings.NewReader(prompt))
				for k, v := range tc.hdr {
					req.Header.Set(k, v)
				}
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || n == 0 {
					b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
		})
	}
}

// BenchmarkPrefillBody measures the prefill-leg rewrite (parse + rewrite) by body size.
func BenchmarkPrefillBody(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10, 1 << 20} {
		body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", size) +
			`"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":64,"temperature":0.7}`)
		b.Run("bytes="+strconv.Itoa(size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				obj, err := parseObject(body)
				if err != nil {
					b.Fatal(err)
				}
				_ = prefillBody(obj, pathChatCompletions)
			}
		})
	}
}
