package kvindex

import "testing"

func TestParseMedium(t *testing.T) {
	cases := []struct {
		in   string
		nil_ bool
		want Medium
		ok   bool
	}{
		{nil_: true, want: GPU, ok: true},
		{in: "", want: GPU, ok: true},
		{in: "GPU", want: GPU, ok: true},
		{in: "gpu", want: GPU, ok: true},
		{in: "Device", want: GPU, ok: true},
		{in: "CPU", want: CPU, ok: true},
		{in: "cpu_pinned", want: CPU, ok: true},
		{in: "CPU_TIER1", want: CPU, ok: true},
		{in: "CPU_TIER2", want: CPU, ok: true},
		{in: "STORAGE", want: Disk, ok: true},
		{in: "fs", want: Disk, ok: true},
		{in: "OBJ", want: Disk, ok: true},
		{in: "DISK", want: Disk, ok: true},
		{in: "NVMe", want: Disk, ok: true},
		{in: "EXTERNAL", want: Disk, ok: true},
		{in: "NETWORK", want: Disk, ok: true},
		{in: "REMOTE", want: Disk, ok: true},
		{in: "shared", want: Disk, ok: true},
		{in: "GPUS"},
		{in: "CPU_TIER3"},
		{in: "HBM"},
		{in: "G\xffU"},
	}
	for _, c := range cases {
		var b []byte
		if !c.nil_ {
			b = []byte(c.in)
		}
		got, ok := ParseMedium(b)
		if got != c.want || ok != c.ok {
			t.Errorf("ParseMedium(%q) = (%v, %v), want (%v, %v)", c.in, got, ok, c.want, c.ok)
		}
	}
	b := []byte("cpu_tier2")
	if a := testing.AllocsPerRun(100, func() { _, _ = ParseMedium(b) }); a != 0 {
		t.Errorf("ParseMedium allocated %.1f times", a)
	}
	for m, want := range map[Medium]string{GPU: "gpu", CPU: "cpu", Disk: "disk", 7: "unknown"} {
		if m.String() != want {
			t.Errorf("Medium(%d).String() = %q, want %q", m, m.String(), want)
		}
	}
}
