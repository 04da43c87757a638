package image

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"gopkg.in/yaml.v3"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// built is one build of the images shared by the tests of this package (the first build of a
// fresh checkout compiles every package with -trimpath: minutes on two cores).
var built struct {
	once sync.Once
	opts Options
	res  []Result
	err  error
}

func buildOnce(t *testing.T) (Options, []Result) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the three binaries and their images; not in -short mode")
	}
	built.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		o, err := Defaults(ctx, Options{Root: repoRoot(t), Out: filepath.Join(sharedDir, "a")})
		if err != nil {
			built.err = err
			return
		}
		built.opts = o
		built.res, built.err = Build(ctx, o)
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.opts, built.res
}

// TestImages builds the three images and checks what a container runtime and Kubernetes rely
// on: the config (numeric non-root user, entrypoint, ports, OCI labels), the file system (every
// shared library each ELF file needs is inside the image, the loader too; pd-sidecar static),
// the docker archive holding the same image as the OCI layout, and a second build giving the
// same digests (fixed times, -trimpath, no build id).
func TestImages(t *testing.T) {
	o, res := buildOnce(t)
	if len(res) != len(Specs) {
		t.Fatalf("%d images built, want %d", len(res), len(Specs))
	}
	lp, err := layout.FromPath(filepath.Join(o.Out, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		t.Run(r.Spec.Name, func(t *testing.T) {
			var desc *v1.Descriptor
			for i, d := range im.Manifests {
				if d.Annotations[RefAnnotation] == r.Ref {
					desc = &im.Manifests[i]
				}
			}
			if desc == nil || desc.Digest != r.Digest {
				t.Fatalf("OCI layout: no manifest %s annotated %s (index: %+v)", r.Digest, r.Ref, im.Manifests)
			}
			img, err := lp.Image(desc.Digest)
			if err != nil {
				t.Fatal(err)
			}
			checkConfig(t, o, r.Spec, img)
			checkFiles(t, r.Spec, img)
			tag, _ := name.NewTag(r.Ref)
			arch, err := tarball.ImageFromPath(r.Archive, &tag)
			if err != nil {
				t.Fatalf("docker archive %s has no image tagged %s: %v", r.Archive, r.Ref, err)
			}
			want, _ := img.ConfigName()
			if got, err := arch.ConfigName(); err != nil || got != want {
				t.Errorf("docker archive config %v (%v), OCI layout config %v", got, err, want)
			}
		})
	}
}

func checkConfig(t *testing.T, o Options, s Spec, img v1.Image) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" {
		t.Errorf("user %q, want the numeric 65532:65532 (runAsNonRoot checks a number)", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/" + s.Name}) || len(c.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want [/usr/local/bin/%s] and no cmd (the chart passes args)", c.Entrypoint, c.Cmd, s.Name)
	}
	for _, p := range s.Ports {
		if _, ok := c.ExposedPorts[p]; !ok {
			t.Errorf("port %s not exposed: %v", p, c.ExposedPorts)
		}
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  o.Version,
		"org.opencontainers.image.revision": o.Revision,
		"org.opencontainers.image.source":   Source,
		"org.opencontainers.image.title":    s.Name,
	} {
		if c.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], want)
		}
	}
	if !cf.Created.Time.Equal(o.Epoch) || cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("created %v os %s arch %s; want %v linux %s", cf.Created, cf.OS, cf.Architecture, o.Epoch, runtime.GOARCH)
	}
}

// libDirs are the directories glibc's loader searches by default on Debian amd64/arm64 (no
// ld.so.cache in the image, no RUNPATH in the binaries).
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
	"/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

func checkFiles(t *testing.T, s Spec, img v1.Image) {
	t.Helper()
	hdrs := map[string]*tar.Header{}
	elfs := map[string][]byte{}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := "/" + strings.TrimSuffix(h.Name, "/")
		hdrs[p] = h
		if h.Typeflag == tar.TypeSymlink {
			t.Errorf("%s is a symlink; the image holds real files only", p)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.HasPrefix(b, []byte(elf.ELFMAG)) {
				elfs[p] = b
			}
		}
	}
	bin := "/usr/local/bin/" + s.Name
	if h := hdrs[bin]; h == nil || h.Mode&0o111 == 0 || elfs[bin] == nil {
		t.Fatalf("%s missing or not an executable ELF file: %+v", bin, h)
	}
	if h := hdrs["/home/nonroot"]; h == nil || h.Uid != UID || h.Gid != GID {
		t.Errorf("/home/nonroot (HOME: the Hugging Face cache) not owned by %d: %+v", UID, h)
	}
	if h := hdrs["/tmp"]; h == nil || h.Mode&0o7777 != 0o1777 {
		t.Errorf("/tmp not mode 1777: %+v", h)
	}
	if h := hdrs["/etc/passwd"]; h == nil || h.Size == 0 {
		t.Errorf("no /etc/passwd")
	}
	for p, h := range hdrs {
		if p != "/home/nonroot" && (h.Uid != 0 || h.Gid != 0) {
			t.Errorf("%s owned by %d:%d; only the home directory belongs to the user", p, h.Uid, h.Gid)
		}
	}
	have := func(soname string) bool {
		for _, d := range libDirs {
			if _, ok := elfs[path.Join(d, soname)]; ok {
				return true
			}
		}
		return false
	}
	for p, b := range elfs {
		f, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		needed, err := f.ImportedLibraries()
		if err != nil {
			t.Errorf("%s: %v", p, err)
		}
		for _, so := range needed {
			if !have(so) {
				t.Errorf("%s needs %s, which is not in the image", p, so)
			}
		}
		for _, prog := range f.Progs {
			if prog.Type != elf.PT_INTERP {
				continue
			}
			interp, _ := io.ReadAll(prog.Open())
			ip := strings.TrimRight(string(interp), "\x00")
			if _, ok := elfs[ip]; !ok {
				t.Errorf("%s's loader %s is not in the image", p, ip)
			}
			if !s.Cgo {
				t.Errorf("%s is dynamic (loader %s); %s is built with CGO_ENABLED=0", p, ip, s.Name)
			}
		}
		f.Close()
	}
	if s.Cgo {
		needed, _ := elfFile(t, elfs[bin]).ImportedLibraries()
		if !slices.Contains(needed, "libczmq.so.4") {
			t.Errorf("%s needs %v; want libczmq.so.4 among them (the check above would be empty otherwise)", bin, needed)
		}
		if hdrs["/usr/share/doc/condisagg-image/packages"] == nil || hdrs["/usr/share/doc/libczmq4/copyright"] == nil {
			t.Errorf("the Debian package list or libczmq4's copyright file is missing")
		}
	}
}

func elfFile(t *testing.T, b []byte) *elf.File {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestReproducible builds again into another directory: same commit, same machine, same
// digests.
func TestReproducible(t *testing.T) {
	o, first := buildOnce(t)
	o.Out = filepath.Join(sharedDir, "b")
	second, err := Build(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range first {
		if first[i].Digest != second[i].Digest {
			t.Errorf("%s: %s then %s", first[i].Ref, first[i].Digest, second[i].Digest)
		}
	}
}

// TestChartDefaultIsBuilt: the chart's default image is what Build tags, so an install with
// default values runs the image `make image` produced.
func TestChartDefaultIsBuilt(t *testing.T) {
	root := repoRoot(t)
	v, err := ChartAppVersion(root)
	if err != nil {
		t.Fatal(err)
	}
	o, err := Defaults(t.Context(), Options{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if o.Version != v {
		t.Errorf("default image version %q, chart appVersion %q", o.Version, v)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "helm", "condisagg", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Image struct{ Repository, Tag string }
	}
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	tag := values.Image.Tag
	if tag == "" { // the deployment template's default
		tag = v
	}
	if got, want := values.Image.Repository+":"+tag, Specs[0].Name+":"+o.Version; got != want {
		t.Errorf("chart default image %s, make image builds %s", got, want)
	}
	tmpl, err := os.ReadFile(filepath.Join(root, "deploy", "helm", "condisagg", "templates", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(tmpl, []byte(`image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"`)) {
		t.Errorf("the deployment template no longer names the image as repository:(tag or appVersion); update this test")
	}
}

func TestBadOptions(t *testing.T) {
	_, err := Build(t.Context(), Options{Root: repoRoot(t), Out: t.TempDir(), Version: "1.0/x", Revision: "r", Epoch: time.Unix(1, 0)})
	if err == nil || !strings.Contains(err.Error(), "not a valid image tag") {
		t.Errorf("version with a slash: %v", err)
	}
	_, err = Build(t.Context(), Options{Root: repoRoot(t), Out: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "need Version, Revision and Epoch") {
		t.Errorf("empty options: %v", err)
	}
}
