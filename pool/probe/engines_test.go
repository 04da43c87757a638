package probe

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/condisagg/condisagg/pool"
)

// TestCheckEngines serves SGLang 0.5.23's own /server_info body (page size 16, two ranks, KV
// events on ports 5557/5567; pool/testdata/gen_sglang_server_info.py) from real HTTP servers on
// 127.0.0.1 and checks what the shell logs for a worker that fits, one whose block size
// differs, one that does not answer yet and a vLLM worker (not read).
func TestCheckEngines(t *testing.T) {
	body, err := os.ReadFile("testdata/sglang_server_info.json")
	if err != nil {
		t.Fatal(err)
	}
	reads := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/server_info" {
			http.NotFound(w, r)
			return
		}
		reads++
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	ep := srv.Listener.Addr().String()
	host, _, _ := net.SplitHostPort(ep)
	closed := httptest.NewServer(http.NotFoundHandler())
	dead := closed.Listener.Addr().String()
	closed.Close()
	for _, c := range []struct {
		name      string
		blockSize int
		worker    pool.WorkerConfig
		want      string
	}{
		{"fits", 16, pool.WorkerConfig{Name: "sg", Role: pool.RoleDecode, Endpoint: ep, Engine: pool.EngineSGLang, DataParallelSize: 2,
			KVEvents: "tcp://" + host + ":5557", KVReplay: "tcp://" + host + ":5567"},
			`level=INFO msg="sglang worker's flags fit condisagg's configuration" worker=sg endpoint=` + ep},
		{"page size differs", 32, pool.WorkerConfig{Name: "sg", Role: pool.RoleDecode, Endpoint: ep, Engine: pool.EngineSGLang, DataParallelSize: 2},
			`level=ERROR msg="sglang worker's flags do not fit condisagg's configuration" worker=sg endpoint=` + ep +
				` err="--page-size is 16; start SGLang with --page-size 32`},
		{"no answer yet", 16, pool.WorkerConfig{Name: "sg", Role: pool.RoleDecode, Endpoint: dead, Engine: pool.EngineSGLang}, ""},
		{"vLLM is not read", 16, pool.WorkerConfig{Name: "v", Role: pool.RoleDecode, Endpoint: ep}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			p, err := pool.New(pool.Config{BlockSize: c.blockSize, Workers: []pool.WorkerConfig{c.worker}}, pool.Options{Metrics: pool.NewMetrics(prometheus.NewRegistry())})
			if err != nil {
				t.Fatal(err)
			}
			s := New(p, Options{HTTPClient: srv.Client(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			reads = 0
			done := map[string]bool{}
			for range 2 { // the second pass reads nothing again
				s.checkEnginesOnce(context.Background(), done)
			}
			got := strings.TrimSpace(logs.String())
			if c.want == "" && got != "" || c.want != "" && (!strings.Contains(got, c.want) || strings.Count(got, "\n") != 0) {
				t.Fatalf("logged\n%s\nwant one line containing\n%s", got, c.want)
			}
			if wantReads := map[bool]int{true: 1, false: 0}[c.want != ""]; reads != wantReads {
				t.Fatalf("%d reads of /server_info, want %d", reads, wantReads)
			}
		})
	}
}
