package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/condisagg/condisagg/cost"
	"github.com/condisagg/condisagg/server/statuspage"
)

// modelFileText is m's model file as condisagg calibrate writes it.
func modelFileText(t *testing.T, m cost.Model) string {
	t.Helper()
	data, err := cost.NewFile(m, nil).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestServeCostModelFile: serve's slo policy forecasts with router.cost_model_file; the log
// and the status page name the model and its file; a changed model file is reloaded like the
// configuration (a bad one rejected, the old model kept); a bad model file at start is refused
// with the key, the file and the line.
func TestServeCostModelFile(t *testing.T) {
	model := requireModel(t)
	dir := t.TempDir()
	m := cost.Model{Name: "qwen3-cpu", T0: 12, A1: 0.4, A2: 2e-5, D1: 0.3, D2: 1e-4, BytesPerToken: 114688, XferAlphaMS: 0.8, XferGBps: 3, NumGPUBlocks: 4000}
	modelPath := writeFile(t, dir, "qwen3-cpu.yaml", modelFileText(t, m))
	cfg := strings.Replace(serveYAML, "MODEL", model, 1)
	cfg = strings.Replace(cfg, "kv_events: false", "kv_events: true", 1)
	cfg = strings.Replace(cfg, "conditional_disagg: false", "conditional_disagg: true\n  conditional_disagg_config: {policy: slo}\n  cost_model_file: "+modelPath, 1)
	cfgPath := writeFile(t, dir, "condisagg.yaml", cfg+workersYAML)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs, reloads, exit, logs := serveReloading(ctx, cfgPath)
	var a listenAddrs
	select {
	case a = <-addrs:
	case code := <-exit:
		t.Fatalf("serve exited %d:\n%s", code, logs.String())
	}
	defer func() {
		cancel()
		if code := <-exit; code != 0 {
			t.Errorf("serve exit %d:\n%s", code, logs.String())
		}
	}()
	if want := `"msg":"slo policy cost model","policy":"live","cost_model":"qwen3-cpu","source":"file ` + modelPath + `"`; !strings.Contains(logs.String(), want) {
		t.Fatalf("start log lacks %s:\n%s", want, logs.String())
	}
	state := func() statuspage.State {
		t.Helper()
		_, b := uiGet(t, a.http, "/ui/api/state", "")
		var st statuspage.State
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatalf("%v:\n%s", err, b)
		}
		return st
	}
	if st := state(); st.Policy != "slo" || st.CostModel == nil || st.CostModel.Name != "qwen3-cpu" || st.CostModel.File != modelPath {
		t.Fatalf("status page policy %q cost model %+v, want qwen3-cpu from %s", st.Policy, st.CostModel, modelPath)
	}
	wait := func() reloadEvent {
		t.Helper()
		select {
		case ev := <-reloads:
			return ev
		case <-time.After(30 * time.Second):
			t.Fatalf("no reload after the model file changed:\n%s", logs.String())
		}
		return reloadEvent{}
	}
	replaceFile(t, modelPath, strings.Replace(modelFileText(t, m), "d2:", "dd2:", 1))
	if ev := wait(); ev.trigger != "file_changed" || ev.err == nil || !strings.Contains(ev.err.Error(), `router.cost_model_file`) ||
		!strings.Contains(ev.err.Error(), `unknown key "dd2"`) {
		t.Fatalf("bad model file: %+v", ev)
	}
	if st := state(); st.CostModel == nil || st.CostModel.Name != "qwen3-cpu" {
		t.Fatalf("after a rejected model file the old model must stay: %+v", st.CostModel)
	}
	m2 := m
	m2.Name, m2.T0 = "qwen3-cpu-recalibrated", 13.5
	replaceFile(t, modelPath, modelFileText(t, m2))
	if ev := wait(); ev.err != nil {
		t.Fatalf("new model file rejected: %v", ev.err)
	}
	if st := state(); st.CostModel == nil || st.CostModel.Name != "qwen3-cpu-recalibrated" {
		t.Fatalf("after the new model file: %+v", st.CostModel)
	}
	if !strings.Contains(logs.String(), `"cost_model":"qwen3-cpu-recalibrated","source":"file `+modelPath+`"`) {
		t.Fatalf("reload log lacks the new model:\n%s", logs.String())
	}

	// At start a model file that fails validation is refused (exit 2) with the key, the file
	// and the line.
	badPath := writeFile(t, dir, "bad.yaml", strings.Replace(modelFileText(t, m), "a1:", "al:", 1))
	badCfg := writeFile(t, dir, "bad-condisagg.yaml", strings.Replace(cfg, modelPath, badPath, 1)+workersYAML)
	var errOut bytes.Buffer
	if code := runServe(ctx, []string{"--config", badCfg}, &errOut, serveHooks{}); code != 2 ||
		!strings.Contains(errOut.String(), "config: router.cost_model_file: cost: model file "+badPath+": line ") ||
		!strings.Contains(errOut.String(), `unknown key "al"`) {
		t.Fatalf("bad model file at start: exit %d:\n%s", code, errOut.String())
	}
}
