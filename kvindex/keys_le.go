//go:build 386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm

package kvindex

import (
	"unsafe"

	"github.com/zeebo/xxh3"
)

// localHash returns XXH3_64 of the block's tokens as little-endian uint32s. On little-endian
// machines the token slice already has that layout, so it is hashed in place.
func localHash(block []uint32, seed uint64) uint64 {
	if len(block) == 0 {
		return xxh3.HashSeed(nil, seed)
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&block[0])), 4*len(block))
	return xxh3.HashSeed(b, seed)
}
