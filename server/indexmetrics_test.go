package server

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/condisagg/condisagg/kvindex"
	"github.com/condisagg/condisagg/pool"
	"github.com/condisagg/condisagg/route"
)

// TestIndexCollector: condisagg_indexed_blocks{worker,medium} follows each model's index, for
// the workers its pool knows, and reads the models again at every scrape.
func TestIndexCollector(t *testing.T) {
	newModel := func(name string, workers ...string) route.ModelInfo {
		var ws []pool.WorkerConfig
		for _, w := range workers {
			ws = append(ws, pool.WorkerConfig{Name: w, Role: pool.RoleDecode, Endpoint: "127.0.0.1:1"})
		}
		p, err := pool.New(pool.Config{Workers: ws, BlockSize: 16},
			pool.Options{Metrics: pool.NewMetrics(prometheus.NewRegistry())})
		if err != nil {
			t.Fatal(err)
		}
		ix, err := kvindex.New(kvindex.Config{BlockSize: 16})
		if err != nil {
			t.Fatal(err)
		}
		return route.ModelInfo{Name: name, Pool: p, Index: ix}
	}
	store := func(ix *kvindex.Index, w string, m kvindex.Medium, first uint64, n int) {
		hashes, tokens := make([]uint64, n), make([]uint32, n*16)
		for i := range hashes {
			hashes[i] = first + uint64(i)
		}
		for i := range tokens {
			tokens[i] = uint32(first) + uint32(i)
		}
		st := &kvindex.Store{Medium: m, Hashes: hashes, Tokens: tokens, BlockSize: 16, PlainBlocks: n}
		if res := ix.Store(kvindex.WorkerID(w), st); res.Skip != kvindex.SkipNone {
			t.Fatalf("store on %s: skipped: %v", w, res.Skip)
		}
	}
	a, b := newModel("a", "a-decode-0", "a-decode-1"), newModel("b", "b-decode-0")
	store(a.Index, "a-decode-0", kvindex.GPU, 100, 5)
	store(a.Index, "a-decode-0", kvindex.CPU, 200, 2)
	store(b.Index, "b-decode-0", kvindex.GPU, 300, 7)
	store(b.Index, "gone", kvindex.GPU, 400, 3) // indexed, but not in the pool: not reported

	models := []route.ModelInfo{a, b}
	reg := prometheus.NewRegistry()
	if err := reg.Register(indexCollector{func() []route.ModelInfo { return models }}); err != nil {
		t.Fatal(err)
	}
	const head = `
# HELP condisagg_indexed_blocks Prefix-index entries per worker and medium (gpu, cpu, disk).
# TYPE condisagg_indexed_blocks gauge
`
	want := head + `condisagg_indexed_blocks{medium="cpu",worker="a-decode-0"} 2
condisagg_indexed_blocks{medium="disk",worker="a-decode-0"} 0
condisagg_indexed_blocks{medium="gpu",worker="a-decode-0"} 5
condisagg_indexed_blocks{medium="cpu",worker="b-decode-0"} 0
condisagg_indexed_blocks{medium="disk",worker="b-decode-0"} 0
condisagg_indexed_blocks{medium="gpu",worker="b-decode-0"} 7
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "condisagg_indexed_blocks"); err != nil {
		t.Fatal(err)
	}
	// The next scrape sees the models of that moment.
	models = models[1:]
	want = head + `condisagg_indexed_blocks{medium="cpu",worker="b-decode-0"} 0
condisagg_indexed_blocks{medium="disk",worker="b-decode-0"} 0
condisagg_indexed_blocks{medium="gpu",worker="b-decode-0"} 7
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "condisagg_indexed_blocks"); err != nil {
		t.Fatal(err)
	}
}
