package sim

import "github.com/condisagg/condisagg/cost"

// CostModel is the calibrated step-time and transfer model (package cost), shared with the slo
// policy so the simulator and the router's estimates read the same coefficients.
type CostModel = cost.Model

// StepShape is what one scheduler step computes (cost.StepShape).
type StepShape = cost.StepShape

// PerfModelNames lists the names PerfModel accepts.
func PerfModelNames() []string { return cost.Names() }

// PerfModel returns the calibrated coefficients named name (cost.ByName).
func PerfModel(name string) (CostModel, error) { return cost.ByName(name) }

// ResolvePerfModel returns the calibration named arg or, for an argument ending in .yaml or
// .yml, the model file written by `condisagg calibrate` read with readFile (cost.Resolve).
func ResolvePerfModel(arg string, readFile func(string) ([]byte, error)) (CostModel, error) {
	return cost.Resolve(arg, readFile)
}
