package main

import (
	"testing"

	"github.com/condisagg/condisagg/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }
