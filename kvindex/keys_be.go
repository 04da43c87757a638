//go:build !(386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm)

package kvindex

// localHash returns XXH3_64 of the block's tokens as little-endian uint32s.
func localHash(block []uint32, seed uint64) uint64 { return localHashPortable(block, seed) }
