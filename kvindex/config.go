package kvindex

import (
	"errors"
	"fmt"
)

// DefaultMaxBlocksPerWorker is the entry cap per worker used when Config.MaxBlocksPerWorker is 0:
// 2,097,152 entries (all media together), about eight times the GPU cache of a large engine
// (num_gpu_blocks of 100k–250k at block size 16) and room for a CPU tier beside it.
const DefaultMaxBlocksPerWorker = 1 << 21

// MaxBlockSize is the largest block size Config accepts, in tokens.
const MaxBlockSize = 1 << 16

// Config configures an Index. Validate it with Validate (New does).
type Config struct {
	// BlockSize is the pool's block size B in tokens; Store events with tokens and another
	// block_size are skipped (SkipBlockSizeMismatch). Required, 1..MaxBlockSize.
	BlockSize int
	// MaxBlocksPerWorker caps the entries one worker may hold over all media; a Store that could
	// exceed it is refused whole (SkipCapacity). 0 means DefaultMaxBlocksPerWorker.
	MaxBlocksPerWorker int
	// Keys is what a block key covers (KeysPlain or KeysBigram); stores of the other kind are
	// refused (SkipKeySchemeMismatch).
	Keys KeyScheme
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.MaxBlocksPerWorker == 0 {
		c.MaxBlocksPerWorker = DefaultMaxBlocksPerWorker
	}
	return c
}

// Validate returns every problem of c (after defaults) as field/value/rule errors joined with
// errors.Join, or nil.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.BlockSize < 1 || c.BlockSize > MaxBlockSize {
		errs = append(errs, fmt.Errorf("kvindex: config block_size=%d: must be in [1, %d]", c.BlockSize, MaxBlockSize))
	}
	if c.MaxBlocksPerWorker < 1 || c.MaxBlocksPerWorker > maxRefs {
		errs = append(errs, fmt.Errorf("kvindex: config max_blocks_per_worker=%d: must be 0 (default %d) or in [1, %d]",
			c.MaxBlocksPerWorker, DefaultMaxBlocksPerWorker, maxRefs))
	}
	if c.Keys > KeysBigram {
		errs = append(errs, fmt.Errorf("kvindex: config keys=%d: must be KeysPlain (0) or KeysBigram (1)", c.Keys))
	}
	return errors.Join(errs...)
}
