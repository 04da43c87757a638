package cost

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// File is the YAML form of a Model: the model file `condisagg calibrate` writes and that
// `tune`, `matrix` and vllm-sim accept in place of a calibration name. Every coefficient key is
// required, so a typo cannot silently leave a term at zero; Calibration is optional and only
// informative (what was measured, how well the fit matched).
type File struct {
	Name          string       `yaml:"name"`
	T0            *float64     `yaml:"t0"`
	A1            *float64     `yaml:"a1"`
	A2            *float64     `yaml:"a2"`
	D1            *float64     `yaml:"d1"`
	D2            *float64     `yaml:"d2"`
	BytesPerToken *float64     `yaml:"bytes_per_token"`
	XferAlphaMS   *float64     `yaml:"xfer_alpha_ms"`
	XferGBps      *float64     `yaml:"xfer_gbps"`
	NumGPUBlocks  *int         `yaml:"num_gpu_blocks"`
	Calibration   *Calibration `yaml:"calibration,omitempty"`
}

// Calibration records how a model file was measured. Nothing reads it back into the Model.
type Calibration struct {
	Endpoint    string             `yaml:"endpoint"`
	ServedModel string             `yaml:"served_model"`
	Time        string             `yaml:"time"`
	Samples     int                `yaml:"samples"`
	R2          float64            `yaml:"r2"`
	OverheadMS  float64            `yaml:"request_overhead_ms"`
	PerTokenMS  float64            `yaml:"request_overhead_per_token_ms"`
	Terms       map[string]Quality `yaml:"terms,omitempty"`
	RelStdErr   map[string]float64 `yaml:"rel_std_err,omitempty"`
	NotMeasured []string           `yaml:"not_measured,omitempty"`
}

// Quality is the fit quality over one family of measurements (prefill or decode).
type Quality struct {
	Samples     int     `yaml:"samples"`
	R2          float64 `yaml:"r2"`
	WorstRelErr float64 `yaml:"worst_rel_err"`
}

// maxFileBytes bounds a model file: a real one is well under a kilobyte.
const maxFileBytes = 1 << 20

// fileKeys are the top-level keys of a model file, in the order they are written.
var fileKeys = []string{"name", "t0", "a1", "a2", "d1", "d2", "bytes_per_token", "xfer_alpha_ms", "xfer_gbps", "num_gpu_blocks", "calibration"}

// ParseFile decodes a model file strictly: unknown keys, missing coefficients, a second
// document and invalid values are errors naming the key. source names the file in errors.
func ParseFile(source string, data []byte) (Model, *Calibration, error) {
	fail := func(format string, a ...any) (Model, *Calibration, error) {
		return Model{}, nil, fmt.Errorf("cost: model file %s: "+format, append([]any{source}, a...)...)
	}
	if len(data) > maxFileBytes {
		return fail("%d bytes: larger than %d", len(data), maxFileBytes)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return fail("%v", err)
	}
	if len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		return fail("want a mapping of %s", strings.Join(fileKeys, ", "))
	}
	var f File
	fields := map[string]any{"name": &f.Name, "t0": &f.T0, "a1": &f.A1, "a2": &f.A2, "d1": &f.D1, "d2": &f.D2,
		"bytes_per_token": &f.BytesPerToken, "xfer_alpha_ms": &f.XferAlphaMS, "xfer_gbps": &f.XferGBps,
		"num_gpu_blocks": &f.NumGPUBlocks, "calibration": &f.Calibration}
	var errs []string
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content[0].Content); i += 2 {
		k, v := root.Content[0].Content[i], root.Content[0].Content[i+1]
		dst, ok := fields[k.Value]
		switch {
		case !ok:
			errs = append(errs, fmt.Sprintf("line %d: unknown key %q (want %s)", k.Line, k.Value, strings.Join(fileKeys, ", ")))
		case seen[k.Value]:
			errs = append(errs, fmt.Sprintf("line %d: %s: given twice", k.Line, k.Value))
		default:
			if err := v.Decode(dst); err != nil {
				errs = append(errs, fmt.Sprintf("line %d: %s: %q is not a %s", v.Line, k.Value, v.Value, kindOf(k.Value)))
			}
		}
		seen[k.Value] = true
	}
	if len(errs) > 0 {
		return fail("%s", strings.Join(errs, "; "))
	}
	m, err := f.Model()
	if err != nil {
		return fail("%v", err)
	}
	if m.Name == "" {
		m.Name = source
	}
	return m, f.Calibration, nil
}

// kindOf names what the value of key must be.
func kindOf(key string) string {
	switch key {
	case "name":
		return "string"
	case "num_gpu_blocks":
		return "whole number"
	case "calibration":
		return "calibration record"
	}
	return "number"
}

// Model checks that every coefficient is present and valid and returns the Model.
func (f File) Model() (Model, error) {
	var errs []error
	get := func(key string, p *float64) float64 {
		if p == nil {
			errs = append(errs, fmt.Errorf("%s: missing (a number >= 0)", key))
			return 0
		}
		return *p
	}
	m := Model{Name: f.Name, T0: get("t0", f.T0), A1: get("a1", f.A1), A2: get("a2", f.A2), D1: get("d1", f.D1), D2: get("d2", f.D2),
		BytesPerToken: get("bytes_per_token", f.BytesPerToken), XferAlphaMS: get("xfer_alpha_ms", f.XferAlphaMS), XferGBps: get("xfer_gbps", f.XferGBps)}
	switch {
	case f.NumGPUBlocks == nil:
		errs = append(errs, errors.New("num_gpu_blocks: missing (KV capacity in 16-token blocks, > 0)"))
	case *f.NumGPUBlocks <= 0:
		errs = append(errs, fmt.Errorf("num_gpu_blocks: %d must be > 0", *f.NumGPUBlocks))
	default:
		m.NumGPUBlocks = *f.NumGPUBlocks
	}
	if len(errs) == 0 {
		if err := m.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if m.T0 == 0 && m.A1 == 0 && m.D1 == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("t0, a1, d1: all 0: a step would take no time"))
	}
	return m, errors.Join(errs...)
}

// NewFile is the model file of m with calibration record c (nil: none).
func NewFile(m Model, c *Calibration) File {
	p := func(v float64) *float64 { return &v }
	n := m.NumGPUBlocks
	return File{Name: m.Name, T0: p(m.T0), A1: p(m.A1), A2: p(m.A2), D1: p(m.D1), D2: p(m.D2),
		BytesPerToken: p(m.BytesPerToken), XferAlphaMS: p(m.XferAlphaMS), XferGBps: p(m.XferGBps), NumGPUBlocks: &n, Calibration: c}
}

// Marshal writes f as YAML with a header comment naming the units; ParseFile reads it back.
func (f File) Marshal() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# condisagg cost model (docs perf-model §1-§4): t_step = t0 + a1·ΣN + a2·ΣN(P+N/2) + d1·B + d2·ΣC\n")
	b.WriteString("# times in ms; a1, d2 per token, a2 per query-key pair, d1 per decode sequence;\n")
	b.WriteString("# transfer t = xfer_alpha_ms + tokens·bytes_per_token / (xfer_gbps·1e9) s; num_gpu_blocks in 16-token blocks\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(f); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// IsFile reports whether arg names a model file rather than a calibration: it ends in .yaml or
// .yml.
func IsFile(arg string) bool {
	return strings.HasSuffix(arg, ".yaml") || strings.HasSuffix(arg, ".yml")
}

// Resolve returns the calibration named arg (ByName) or, when arg is a model file (IsFile), the
// file's model read with readFile (os.ReadFile; injected so this package does no I/O).
func Resolve(arg string, readFile func(string) ([]byte, error)) (Model, error) {
	if !IsFile(arg) {
		m, err := ByName(arg)
		if err != nil {
			return Model{}, fmt.Errorf("%w (or a model file ending in .yaml)", err)
		}
		return m, nil
	}
	data, err := readFile(arg)
	if err != nil {
		return Model{}, fmt.Errorf("cost: model file: %w", err)
	}
	m, _, err := ParseFile(arg, data)
	return m, err
}
