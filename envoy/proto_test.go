package envoy

import (
	"encoding/json"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/http/early_header_mutation/header_mutation/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"
)

// yamlToBootstrap decodes Envoy bootstrap YAML into the go-control-plane v1.40.0 proto, with
// unknown fields and unknown typed_config types rejected.
func yamlToBootstrap(t *testing.T, in []byte) *bootstrapv3.Bootstrap {
	t.Helper()
	var doc any
	if err := yaml.Unmarshal(in, &doc); err != nil {
		t.Fatalf("bootstrap is not YAML: %v", err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatalf("bootstrap YAML has no JSON form: %v", err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		t.Fatalf("bootstrap does not decode into envoy.config.bootstrap.v3.Bootstrap: %v", err)
	}
	return &b
}

// TestEveryVariantPassesProtoValidation decodes each rendered variant into the go-control-plane
// Bootstrap and runs its generated ValidateAll (envoy-extproc §7): a check of the same proto
// rules Envoy applies, without the binary.
func TestEveryVariantPassesProtoValidation(t *testing.T) {
	for _, p := range variants() {
		t.Run(variantName(p), func(t *testing.T) {
			out, err := Render(p)
			if err != nil {
				t.Fatal(err)
			}
			b := yamlToBootstrap(t, out)
			// HCM, early header mutation, ext_proc, router, the condisagg cluster's HTTP/2 options,
			// and with fail-open the Lua guard.
			want := map[bool]int{true: 6, false: 5}[p.FailOpen]
			if n := validateDeep(t, b); n != want {
				t.Errorf("validated %d typed configs; want %d", n, want)
			}
			if n := len(b.GetStaticResources().GetClusters()); n != map[bool]int{true: 4, false: 3}[p.FailOpen] {
				t.Errorf("%d clusters decoded", n)
			}
		})
	}
}

// validateDeep runs ValidateAll on m and on every message packed in a google.protobuf.Any inside
// it (typed_config, typed_extension_protocol_options), recursively, since the generated
// validators stop at Any. It returns how many Any payloads it validated.
func validateDeep(t *testing.T, m proto.Message) int {
	t.Helper()
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			t.Errorf("%s: %v", m.ProtoReflect().Descriptor().FullName(), err)
		}
	}
	n := 0
	var walk func(protoreflect.Message)
	walk = func(msg protoreflect.Message) {
		if a, ok := msg.Interface().(*anypb.Any); ok {
			inner, err := anypb.UnmarshalNew(a, proto.UnmarshalOptions{})
			if err != nil {
				t.Errorf("unpack %s: %v", a.GetTypeUrl(), err)
				return
			}
			n += 1 + validateDeep(t, inner)
			return
		}
		msg.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsList() && fd.Message() != nil:
				for i := range v.List().Len() {
					walk(v.List().Get(i).Message())
				}
			case fd.IsMap() && fd.MapValue().Message() != nil:
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					walk(mv.Message())
					return true
				})
			case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
				walk(v.Message())
			}
			return true
		})
	}
	walk(m.ProtoReflect())
	return n
}
