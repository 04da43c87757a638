package cost

import (
	"testing"
	"time"
)

func TestStepCost(t *testing.T) {
	m, err := ByName("llama3.1-8b-h100")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		spec  string
		shape StepShape
		ms    float64
	}{
		{"prefill_1k", "perf-model.md §5 prefill 1k = 29 ms", StepShape{PrefillTokens: 1024, PrefillPairs: 1024 * 512}, 6.5 + 0.021*1024 + 1e-6*1024*512},
		{"decode_B64_C4k", "perf-model.md §5 decode B=64 C=4k = 21.3 ms", StepShape{DecodeSeqs: 64, DecodeContexts: 64 * 4096}, 6.5 + 0.03*64 + 4.9e-5*64*4096},
		{"cached_6k_of_8k", "perf-model.md §5 N=2048 P=6144 = 64 ms", StepShape{PrefillTokens: 2048, PrefillPairs: 2048 * (6144 + 1024)}, 6.5 + 0.021*2048 + 1e-6*2048*7168},
		{"empty", "§1 nothing scheduled", StepShape{}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got, want := m.StepTime(tc.shape), msDuration(tc.ms); got != want {
				t.Fatalf("%s: StepTime = %v, want %v", tc.spec, got, want)
			}
		})
	}
	if got := m.TransferTime(1024); got.Round(100*time.Microsecond) != 3900*time.Microsecond {
		t.Fatalf("perf-model.md §5: transfer of 1k tokens at 40 GB/s = %v, want 3.9ms", got)
	}
}

// TestByName: every listed model resolves and validates; an unknown name lists the known ones.
func TestByName(t *testing.T) {
	for _, n := range Names() {
		m, err := ByName(n)
		if err != nil || m.Validate() != nil || m.Name != n {
			t.Fatalf("%s: %v %v", n, err, m.Validate())
		}
	}
	if _, err := ByName("gpt-x"); err == nil {
		t.Fatal("unknown model accepted")
	}
}
