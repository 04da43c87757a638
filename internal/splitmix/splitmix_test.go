package splitmix

import "testing"

// TestMix64 pins the outputs: the reference sequence of SplitMix64 seeded with 0 (each output
// is Mix64 of the state before the step), so traces, golden decisions and fixtures built on it
// stay reproducible.
func TestMix64(t *testing.T) {
	want := []uint64{0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F, 0xF88BB8A8724C81EC}
	var state uint64
	for i, w := range want {
		if got := Mix64(state); got != w {
			t.Errorf("output %d: Mix64(%#x) = %#x, want %#x", i, state, got, w)
		}
		state += Gamma
	}
}
