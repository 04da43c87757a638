package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// headerFault marks a request whose KV transfer the fault proxy breaks.
const headerFault = "X-Conformance-Fault"

// faultProxy sits between pd-sidecar and the prefill engine. It passes everything through,
// except that for a request marked with headerFault it rewrites the prefill answer's
// kv_transfer_params.remote_engine_id: the decode engine then reaches the real prefill engine's
// NIXL side channel, which answers with its own engine id, and the handshake fails ("Remote
// NIXL agent engine ID mismatch"), a real transfer failure on the real code path.
type faultProxy struct {
	srv    *http.Server
	target string
	client *http.Client
}

func startFaultProxy(listen, target string) (*faultProxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	f := &faultProxy{target: target, client: &http.Client{Timeout: 5 * time.Minute}}
	f.srv = &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

func (f *faultProxy) close() { _ = f.srv.Close() }

func (f *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+f.target+r.URL.RequestURI(), r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := f.client.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if r.Header.Get(headerFault) != "" {
		body = breakEngineID(body)
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
}

// breakEngineID replaces remote_engine_id in a prefill answer's kv_transfer_params.
func breakEngineID(body []byte) []byte {
	var ans map[string]json.RawMessage
	if json.Unmarshal(body, &ans) != nil {
		return body
	}
	var kv map[string]json.RawMessage
	if json.Unmarshal(ans["kv_transfer_params"], &kv) != nil || kv == nil {
		return body
	}
	kv["remote_engine_id"] = json.RawMessage(`"00000000-dead-beef-0000-000000000000"`)
	ans["kv_transfer_params"], _ = json.Marshal(kv)
	out, err := json.Marshal(ans)
	if err != nil {
		return body
	}
	return bytes.TrimSpace(out)
}
