package envoy

import (
	"fmt"
	"net"
	"strconv"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// maxChunk is the largest full-duplex write-back chunk (envoy-extproc §1).
const maxChunk = 62000

// maxTestBody bounds what the test processor assembles per stream.
const maxTestBody = 16 << 20

// testProcessor plays condisagg's side of ext_proc in its simplest form for one body mode, with
// the decision (route + destination) where envoy-extproc §1 puts it: BUFFERED in the body
// response; STREAMED in the headers response (the route is fixed before the body); full duplex in
// the deferred headers response, followed by the body written back in chunks. Bodyless requests
// are decided at once in every mode.
type testProcessor struct {
	extprocv3.UnimplementedExternalProcessorServer
	mode    BodyMode
	decide  func(path string) (route, dest string) // path "" = body unknown (STREAMED)
	headers chan map[string]string                 // request headers as ext_proc saw them, one map per stream
}

// testStream is the state of one Process stream.
type testStream struct {
	p    *testProcessor
	path string
	body []byte // full duplex: the request body assembled so far
}

func (p *testProcessor) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	s := &testStream{p: p}
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil // io.EOF or cancel: the stream is over
		}
		var out []*extprocv3.ProcessingResponse
		switch r := req.Request.(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			out = s.requestHeaders(r.RequestHeaders)
		case *extprocv3.ProcessingRequest_RequestBody:
			if out, err = s.requestBody(r.RequestBody); err != nil {
				return err
			}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			out = []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
				ResponseHeaders: &extprocv3.HeadersResponse{}}}}
		case *extprocv3.ProcessingRequest_ResponseBody:
			out = s.responseBody(r.ResponseBody)
		case *extprocv3.ProcessingRequest_ResponseTrailers:
			out = []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
				ResponseTrailers: &extprocv3.TrailersResponse{}}}}
		default:
			return fmt.Errorf("test processor: unexpected message %T", r)
		}
		for _, m := range out {
			if err := stream.Send(m); err != nil {
				return nil
			}
		}
	}
}

func (s *testStream) requestHeaders(h *extprocv3.HttpHeaders) []*extprocv3.ProcessingResponse {
	hs := map[string]string{}
	for _, hv := range h.GetHeaders().GetHeaders() {
		hs[hv.Key] = string(hv.RawValue) + hv.Value
	}
	s.path = hs[":path"]
	select {
	case s.p.headers <- hs:
	default:
	}
	switch {
	case h.EndOfStream:
		return []*extprocv3.ProcessingResponse{requestHeadersResponse(s.p.decision(s.path, -1))}
	case s.p.mode == Streamed:
		return []*extprocv3.ProcessingResponse{requestHeadersResponse(s.p.decision("", -1))}
	case s.p.mode == FullDuplex:
		return nil // deferred until the body is complete
	default:
		return []*extprocv3.ProcessingResponse{requestHeadersResponse(nil)}
	}
}

func (s *testStream) requestBody(b *extprocv3.HttpBody) ([]*extprocv3.ProcessingResponse, error) {
	body := func(r *extprocv3.BodyResponse) *extprocv3.ProcessingResponse {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: r}}
	}
	switch s.p.mode {
	case Buffered:
		return []*extprocv3.ProcessingResponse{body(&extprocv3.BodyResponse{Response: s.p.decision(s.path, -1)})}, nil
	case Streamed:
		return []*extprocv3.ProcessingResponse{body(&extprocv3.BodyResponse{})}, nil
	}
	if len(s.body)+len(b.Body) > maxTestBody {
		return nil, fmt.Errorf("test processor: body over %d bytes", maxTestBody)
	}
	s.body = append(s.body, b.Body...)
	if !b.EndOfStream {
		return nil, nil
	}
	out := []*extprocv3.ProcessingResponse{requestHeadersResponse(s.p.decision(s.path, len(s.body)))}
	for _, r := range streamedChunks(s.body, true) {
		out = append(out, body(r))
	}
	return out, nil
}

func (s *testStream) responseBody(b *extprocv3.HttpBody) []*extprocv3.ProcessingResponse {
	chunks := []*extprocv3.BodyResponse{{}}
	if s.p.mode == FullDuplex {
		chunks = streamedChunks(b.Body, b.EndOfStream)
	}
	var out []*extprocv3.ProcessingResponse
	for _, c := range chunks {
		out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: c}})
	}
	return out
}

// streamedChunks splits body into full-duplex write-back chunks of at most maxChunk bytes,
// end_of_stream (if eos) on the last only.
func streamedChunks(body []byte, eos bool) []*extprocv3.BodyResponse {
	var out []*extprocv3.BodyResponse
	for off := 0; ; off += maxChunk {
		end := min(off+maxChunk, len(body))
		last := end == len(body)
		out = append(out, &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
			BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
				StreamedResponse: &extprocv3.StreamedBodyResponse{Body: body[off:end], EndOfStream: eos && last}}}}})
		if last {
			return out
		}
	}
}

func requestHeadersResponse(c *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{Response: c}}}
}

// decision is the header mutation routing the request; contentLength >= 0 also sets
// Content-Length (the full-duplex write-back size).
func (p *testProcessor) decision(path string, contentLength int) *extprocv3.CommonResponse {
	route, dest := p.decide(path)
	set := func(k, v string) *corev3.HeaderValueOption {
		return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}}
	}
	hs := []*corev3.HeaderValueOption{set("x-condisagg-route", route), set("x-gateway-destination-endpoint", dest)}
	if contentLength >= 0 {
		hs = append(hs, set("content-length", strconv.Itoa(contentLength)))
	}
	return &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: hs}, ClearRouteCache: true}
}

// startProcessor serves p on 127.0.0.1 with the gRPC health service Envoy's health check asks.
func startProcessor(t *testing.T, p *testProcessor) Endpoint {
	t.Helper()
	e, _ := serveGRPC(t, healthpb.HealthCheckResponse_SERVING, func(srv *grpc.Server) {
		extprocv3.RegisterExternalProcessorServer(srv, p)
	})
	return e
}

// serveGRPC serves a gRPC server on 127.0.0.1 with whatever register adds and the health
// service, whose ext_proc status starts at st; it stops when the test ends.
func serveGRPC(t *testing.T, st healthpb.HealthCheckResponse_ServingStatus, register func(*grpc.Server)) (Endpoint, *health.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	register(srv)
	hs := health.NewServer()
	hs.SetServingStatus("envoy.service.ext_proc.v3.ExternalProcessor", st)
	healthpb.RegisterHealthServer(srv, hs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	e, err := ParseEndpoint(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return e, hs
}
