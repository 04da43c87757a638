package vllmsim

import "net/http"

// receivedPaths are vLLM generation APIs the simulator does not run: the Responses API,
// Anthropic Messages and token-in-token-out generate. Each answers 200 with the request body
// exactly as it arrived ({"object":"vllm-sim.received","path":…,"body":"…"}), so a test
// through Envoy can see what reached the worker (the router's body cleaning, issue 23).
var receivedPaths = []string{"/v1/responses", "/v1/messages", "/inference/v1/generate"}

func (s *Server) handleReceived() {
	for _, p := range receivedPaths {
		s.mux.HandleFunc("POST "+p, func(w http.ResponseWriter, r *http.Request) {
			body, ok := s.readBody(w, r)
			if ok {
				writeJSON(w, map[string]string{"object": "vllm-sim.received", "path": p, "body": string(body)})
			}
		})
	}
}
