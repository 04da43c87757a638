// Package splitmix is the SplitMix64 output function, the one deterministic mixer of the
// simulator (sim, sim/vllmsim) and the workload generators: reproducible draws from a seed
// without a random-number generator's state.
//
// It is a pure leaf: no imports, safe for concurrent use, and it must never change, since
// seeds in traces, golden decisions and fixtures depend on its exact outputs.
package splitmix

// Gamma is SplitMix64's state increment, 2^64 divided by the golden ratio.
const Gamma = 0x9E3779B97F4A7C15

// Mix64 is the output of the SplitMix64 generator whose state was x before the step: x is
// advanced by Gamma and then finalised (Steele, Lea and Flood, "Fast splittable pseudorandom
// number generators", 2014; the constants of Stafford's variant 13).
func Mix64(x uint64) uint64 {
	x += Gamma
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}
