package cost

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// TestFileRoundTrip: every named calibration written as a model file reads back unchanged.
func TestFileRoundTrip(t *testing.T) {
	for _, name := range Names() {
		m, _ := ByName(name)
		c := &Calibration{Endpoint: "http://x", Samples: 3, R2: 0.99, Terms: map[string]Quality{"prefill": {Samples: 2, R2: 0.98, WorstRelErr: 0.01}}}
		data, err := NewFile(m, c).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		got, gotC, err := ParseFile("m.yaml", data)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, data)
		}
		if got != m {
			t.Errorf("%s: read back %+v, want %+v", name, got, m)
		}
		if gotC == nil || gotC.R2 != 0.99 || gotC.Terms["prefill"].WorstRelErr != 0.01 {
			t.Errorf("%s: calibration read back as %+v", name, gotC)
		}
	}
}

const goodFile = `name: x
t0: 5
a1: 0.02
a2: 1.0e-6
d1: 0.05
d2: 4.0e-5
bytes_per_token: 131072
xfer_alpha_ms: 0.5
xfer_gbps: 40
num_gpu_blocks: 1000
`

// TestParseFileErrors: each bad file is refused with an error naming the key and the rule.
func TestParseFileErrors(t *testing.T) {
	tests := []struct {
		name, text string
		want       []string
	}{
		{"unknown_key", goodFile + "t1: 3\n", []string{`line 11: unknown key "t1" (want name, t0`}},
		{"missing_coefficient", strings.Replace(goodFile, "a2: 1.0e-6\n", "", 1), []string{"a2: missing"}},
		{"missing_capacity", strings.Replace(goodFile, "num_gpu_blocks: 1000\n", "", 1), []string{"num_gpu_blocks: missing"}},
		{"zero_capacity", strings.Replace(goodFile, "num_gpu_blocks: 1000", "num_gpu_blocks: 0", 1), []string{"num_gpu_blocks: 0 must be > 0"}},
		{"negative", strings.Replace(goodFile, "d1: 0.05", "d1: -0.05", 1), []string{"d1: -0.05 is not a finite value >= 0"}},
		{"not_a_number", strings.Replace(goodFile, "t0: 5", "t0: fast", 1), []string{`line 2: t0: "fast" is not a number`}},
		{"nan", strings.Replace(goodFile, "t0: 5", "t0: .nan", 1), []string{"t0: NaN"}},
		{"all_zero", strings.NewReplacer("t0: 5", "t0: 0", "a1: 0.02", "a1: 0", "d1: 0.05", "d1: 0").Replace(goodFile), []string{"all 0"}},
		{"list", "- 1\n", []string{"want a mapping"}},
		{"empty", "", []string{"want a mapping"}},
		{"twice", goodFile + "t0: 6\n", []string{"line 11: t0: given twice"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ParseFile("m.yaml", []byte(tc.text))
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.text)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) || !strings.Contains(err.Error(), "model file m.yaml") {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestResolve: a name resolves to the calibration, a .yaml argument to the file's model, and
// neither an unknown name nor an unreadable file passes.
func TestResolve(t *testing.T) {
	read := func(p string) ([]byte, error) {
		if p == "ok.yaml" {
			return []byte(goodFile), nil
		}
		return nil, os.ErrNotExist
	}
	if m, err := Resolve("llama3.1-8b-h100", read); err != nil || m.T0 != 6.5 {
		t.Fatalf("name: %+v, %v", m, err)
	}
	if m, err := Resolve("ok.yaml", read); err != nil || m.Name != "x" || m.D1 != 0.05 || m.NumGPUBlocks != 1000 {
		t.Fatalf("file: %+v, %v", m, err)
	}
	if _, err := Resolve("missing.yaml", read); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := Resolve("gpt", read); err == nil || !strings.Contains(err.Error(), ".yaml") {
		t.Fatalf("unknown name: %v", err)
	}
}

func FuzzParseFile(f *testing.F) {
	f.Add([]byte(goodFile))
	f.Add([]byte("name: [1, 2]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, _, err := ParseFile("f.yaml", data)
		if err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("accepted an invalid model: %v", err)
		}
		again, err := NewFile(m, nil).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		back, _, err := ParseFile("f.yaml", again)
		if err != nil || back != m {
			t.Fatalf("round trip: %+v, %v; want %+v", back, err, m)
		}
	})
}
