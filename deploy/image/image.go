// Package image builds the OCI images of condisagg, pd-sidecar and vllm-sim without a container
// engine: each image is one layer written by go-containerregistry from the binary built here, the
// shared libraries it links (czmq and its closure, from this machine's Debian packages, with their
// copyright files), /etc/passwd and /etc/group naming the non-root user, and the CA bundle. No
// base image is pulled and nothing needs privileges, so the build runs in `make test` on any
// machine that builds the binaries. Every file carries the same modification time (the commit's),
// so two builds of one commit on one machine give the same digests.
package image

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// UID and GID are the images' user: numeric, so that Kubernetes' runAsNonRoot can verify it
// without a passwd lookup; 65532 is the "nonroot" user of the distroless images.
const (
	UID = 65532
	GID = 65532
)

// Spec is one image.
type Spec struct {
	Name        string   // image and binary name: cmd/<Name>, /usr/local/bin/<Name>
	Cgo         bool     // links czmq: the binary is dynamic and its libraries go into the image
	Ports       []string // exposed ports, "9002/tcp"
	Description string
}

// Specs are the images `make image` builds. The ports are the binaries' defaults (condisagg's
// ext_proc and admin ports as the chart sets them; vllm-sim's HTTP and KV event/replay ports).
var Specs = []Spec{
	{Name: "condisagg", Cgo: true, Ports: []string{"9002/tcp", "9003/tcp", "9090/tcp"},
		Description: "condisagg: Envoy ext_proc router for conditional prefill/decode disaggregation"},
	{Name: "pd-sidecar", Ports: []string{"8100/tcp", "9091/tcp"},
		Description: "pd-sidecar: runs the prefill leg beside a vLLM prefill engine, then forwards to the decode worker"},
	{Name: "vllm-sim", Cgo: true, Ports: []string{"8000/tcp", "5557/tcp", "5567/tcp"},
		Description: "vllm-sim: a simulated vLLM worker (OpenAI API, KV events over ZeroMQ) for tests without GPUs"},
}

// Options of a build.
type Options struct {
	Root     string    // repository root (cmd/ and go.mod)
	Out      string    // output directory: oci/ (an OCI layout with every image) and <name>-<version>.tar
	Version  string    // image tag and org.opencontainers.image.version
	Revision string    // org.opencontainers.image.revision: the git commit
	Source   string    // org.opencontainers.image.source
	Epoch    time.Time // every file's mtime and the images' creation time
	Log      io.Writer // progress lines; nil = none
}

// Result is one built image.
type Result struct {
	Spec    Spec
	Ref     string  // name:version, the tag of the docker archive and of the OCI layout entry
	Digest  v1.Hash // manifest digest
	Archive string  // docker-archive tarball (docker load, podman load, kind load image-archive)
}

// RefAnnotation names an image inside the OCI layout (skopeo's oci:DIR:REF, podman's oci:DIR:REF).
const RefAnnotation = "org.opencontainers.image.ref.name"

// Build builds every image of Specs into o.Out, replacing an earlier build there.
func Build(ctx context.Context, o Options) ([]Result, error) {
	if o.Version == "" || o.Revision == "" || o.Epoch.IsZero() {
		return nil, fmt.Errorf("image: Options need Version, Revision and Epoch (got %q, %q, %v)", o.Version, o.Revision, o.Epoch)
	}
	if !regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`).MatchString(o.Version) {
		return nil, fmt.Errorf("image: version %q is not a valid image tag ([A-Za-z0-9_][A-Za-z0-9_.-]*)", o.Version)
	}
	if err := os.RemoveAll(filepath.Join(o.Out, "oci")); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	lp, err := layout.Write(filepath.Join(o.Out, "oci"), empty.Index)
	if err != nil {
		return nil, fmt.Errorf("image: OCI layout: %w", err)
	}
	work, err := os.MkdirTemp("", "condisagg-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	var res []Result
	for _, s := range Specs {
		r, err := buildOne(ctx, o, s, work, lp)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", s.Name, err)
		}
		res = append(res, r)
	}
	return res, nil
}

func buildOne(ctx context.Context, o Options, s Spec, work string, lp layout.Path) (Result, error) {
	bin := filepath.Join(work, s.Name)
	if err := goBuild(ctx, o, s, bin); err != nil {
		return Result{}, err
	}
	files := []file{{dst: "/usr/local/bin/" + s.Name, src: bin, mode: 0o755}}
	if s.Cgo {
		libs, err := sharedLibraries(ctx, bin)
		if err != nil {
			return Result{}, err
		}
		files = append(files, libs...)
		docs, err := copyrights(ctx, libs)
		if err != nil {
			return Result{}, err
		}
		files = append(files, docs...)
	}
	if ca := "/etc/ssl/certs/ca-certificates.crt"; fileExists(ca) {
		// vllm-sim (and condisagg's model.tokenizer) may fetch "hf:" tokenizers over HTTPS.
		files = append(files, file{dst: ca, src: ca, mode: 0o644})
	}
	layerTar, err := rootfs(files, o.Epoch)
	if err != nil {
		return Result{}, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return Result{}, err
	}
	created := v1.Time{Time: o.Epoch}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, History: v1.History{
		Created: created, CreatedBy: "condisagg deploy/image: " + s.Name + " " + o.Version, Comment: "binary, shared libraries, passwd, CA bundle"}})
	if err != nil {
		return Result{}, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return Result{}, err
	}
	cf = cf.DeepCopy()
	cf.Created, cf.Architecture, cf.OS = created, runtime.GOARCH, "linux"
	ports := map[string]struct{}{}
	for _, p := range s.Ports {
		ports[p] = struct{}{}
	}
	cf.Config = v1.Config{
		User:         fmt.Sprintf("%d:%d", UID, GID),
		Entrypoint:   []string{"/usr/local/bin/" + s.Name},
		Env:          []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/nonroot"},
		WorkingDir:   "/home/nonroot",
		ExposedPorts: ports,
		Labels: map[string]string{
			"org.opencontainers.image.title":       s.Name,
			"org.opencontainers.image.description": s.Description,
			"org.opencontainers.image.version":     o.Version,
			"org.opencontainers.image.revision":    o.Revision,
			"org.opencontainers.image.source":      o.Source,
			"org.opencontainers.image.created":     o.Epoch.UTC().Format(time.RFC3339),
		},
		StopSignal: "SIGTERM",
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return Result{}, err
	}
	ref := s.Name + ":" + o.Version
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{RefAnnotation: ref})); err != nil {
		return Result{}, fmt.Errorf("OCI layout: %w", err)
	}
	// A short name: docker load and podman load then tag condisagg:0.1.0 (podman as
	// localhost/condisagg:0.1.0), the chart's default image.
	tag, err := name.NewTag(ref)
	if err != nil {
		return Result{}, err
	}
	archive := filepath.Join(o.Out, s.Name+"-"+o.Version+".tar")
	if err := tarball.WriteToFile(archive, tag, img); err != nil {
		return Result{}, fmt.Errorf("docker archive: %w", err)
	}
	digest, err := img.Digest()
	if err != nil {
		return Result{}, err
	}
	if o.Log != nil {
		size, _ := layer.Size()
		fmt.Fprintf(o.Log, "image %-22s %s  layer %.1f MiB (gzip)  %s\n", ref, digest, float64(size)/(1<<20), archive)
	}
	return Result{Spec: s, Ref: ref, Digest: digest, Archive: archive}, nil
}

// goBuild builds cmd/<name> the way the image ships it: -trimpath and no build id so that the
// bytes depend on the sources and the toolchain only; netgo and osusergo so that name and user
// lookups do not reach glibc's NSS modules (which the image does not carry), leaving czmq as the
// only C code; the version stamped for --version.
func goBuild(ctx context.Context, o Options, s Spec, out string) error {
	const pkg = "github.com/condisagg/condisagg/internal/version"
	ldflags := fmt.Sprintf("-s -w -buildid= -X %s.Version=%s -X %s.Revision=%s", pkg, o.Version, pkg, o.Revision)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-tags", "netgo,osusergo",
		"-ldflags", ldflags, "-o", out, "./cmd/"+s.Name)
	cmd.Dir = o.Root
	cgo := "0"
	if s.Cgo {
		cgo = "1"
	}
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/%s: %w\n%s", s.Name, err, b)
	}
	return nil
}

type file struct {
	dst, src string // path in the image, path here
	mode     int64
}

// lddLine matches "libczmq.so.4 => /lib/x86_64-linux-gnu/libczmq.so.4 (0x...)" and the
// loader's "/lib64/ld-linux-x86-64.so.2 (0x...)"; the vDSO line has no path and is skipped.
var lddLine = regexp.MustCompile(`^\s*(?:\S+\s+=>\s+)?(/\S+)\s+\(0x[0-9a-f]+\)$`)

// sharedLibraries is the loader and every library bin needs at run time, transitively, as ldd
// resolves them on this machine: each copied to the path ldd names (symlinks followed).
func sharedLibraries(ctx context.Context, bin string) ([]file, error) {
	out, err := exec.CommandContext(ctx, "ldd", bin).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w\n%s", bin, err, out)
	}
	var libs []file
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.Contains(line, "not found") {
			return nil, fmt.Errorf("ldd %s: %s (install the library's Debian package, e.g. libczmq4)", bin, strings.TrimSpace(line))
		}
		m := lddLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		libs = append(libs, file{dst: m[1], src: m[1], mode: 0o755})
	}
	if len(libs) == 0 {
		return nil, fmt.Errorf("ldd %s: no libraries listed; is it a static binary built with CGO_ENABLED=1?\n%s", bin, out)
	}
	return libs, nil
}

// copyrights are the copyright files of the Debian packages that own libs (the licences
// travel with the libraries), and /usr/share/doc/condisagg-image/packages listing each package
// and version, so that what an image carries can be checked against Debian's advisories.
func copyrights(ctx context.Context, libs []file) ([]file, error) {
	pkgs := map[string]bool{}
	for _, l := range libs {
		real, err := filepath.EvalSymlinks(l.src)
		if err != nil {
			return nil, err
		}
		var owner string
		// Debian 12 merged /lib into /usr/lib; dpkg knows a file under either name.
		for _, p := range []string{l.src, real, strings.TrimPrefix(real, "/usr"), "/usr" + l.src} {
			out, err := exec.CommandContext(ctx, "dpkg-query", "-S", p).Output()
			if err == nil {
				owner, _, _ = strings.Cut(strings.TrimSpace(string(out)), ":")
				break
			}
		}
		if owner == "" {
			return nil, fmt.Errorf("no Debian package owns %s (dpkg-query -S); the image build takes libraries from Debian packages only", l.src)
		}
		pkgs[owner] = true
	}
	names := make([]string, 0, len(pkgs))
	for p := range pkgs {
		names = append(names, p)
	}
	sort.Strings(names)
	out, err := exec.CommandContext(ctx, "dpkg-query", append([]string{"-W", "-f", "${Package} ${Version}\n"}, names...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg-query -W %v: %w", names, err)
	}
	manifest, err := os.CreateTemp("", "packages-")
	if err != nil {
		return nil, err
	}
	defer manifest.Close()
	if _, err := manifest.Write(out); err != nil {
		return nil, err
	}
	docs := []file{{dst: "/usr/share/doc/condisagg-image/packages", src: manifest.Name(), mode: 0o644}}
	for _, p := range names {
		c := "/usr/share/doc/" + p + "/copyright"
		if fileExists(c) {
			docs = append(docs, file{dst: c, src: c, mode: 0o644})
		}
	}
	return docs, nil
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// rootfs is the layer: the files, their parent directories, /etc/passwd, /etc/group, a
// writable /tmp and the user's home, in sorted order with fixed owners and times.
func rootfs(files []file, mtime time.Time) ([]byte, error) {
	type entry struct {
		hdr  tar.Header
		data []byte
	}
	entries := map[string]*entry{}
	dir := func(p string, mode int64, uid int) {
		entries[p] = &entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(p, "/") + "/", Mode: mode, Uid: uid, Gid: uid}}
	}
	var parents func(p string)
	parents = func(p string) {
		d := path.Dir(p)
		if d == "/" {
			return
		}
		if _, ok := entries[d]; !ok {
			dir(d, 0o755, 0)
		}
		parents(d)
	}
	add := func(p string, data []byte, mode int64) {
		parents(p)
		entries[p] = &entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(p, "/"), Mode: mode, Size: int64(len(data))}, data: data}
	}
	for _, f := range files {
		data, err := os.ReadFile(f.src) // follows symlinks: the image holds real files
		if err != nil {
			return nil, err
		}
		add(f.dst, data, f.mode)
	}
	uid := strconv.Itoa(UID)
	add("/etc/passwd", []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:"+uid+":"+strconv.Itoa(GID)+":nonroot:/home/nonroot:/sbin/nologin\n"), 0o644)
	add("/etc/group", []byte("root:x:0:\nnonroot:x:"+strconv.Itoa(GID)+":\n"), 0o644)
	add("/etc/nsswitch.conf", []byte("hosts: files dns\n"), 0o644)
	dir("/tmp", 0o1777, 0)
	dir("/home", 0o755, 0)
	dir("/home/nonroot", 0o755, UID)
	names := make([]string, 0, len(entries))
	for p := range entries {
		names = append(names, p)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range names {
		e := entries[p]
		e.hdr.ModTime, e.hdr.Format = mtime.UTC(), tar.FormatPAX
		if err := tw.WriteHeader(&e.hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ChartAppVersion is the chart's appVersion: the default image tag of both `make image` and
// the chart (image.tag "" means appVersion), so that the chart's defaults name what is built.
func ChartAppVersion(root string) (string, error) {
	p := filepath.Join(root, "deploy", "helm", "condisagg", "Chart.yaml")
	b, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^appVersion:\s*"?([^"\s]+)"?\s*$`).FindSubmatch(b)
	if m == nil {
		return "", fmt.Errorf("%s: no appVersion line", p)
	}
	return string(m[1]), nil
}

// Source is org.opencontainers.image.source by default: the module's repository.
const Source = "https://github.com/condisagg/condisagg"

// Defaults fills what o leaves empty from the repository: Version from the chart's appVersion,
// Revision from git (with "-dirty" for uncommitted changes to tracked files), Epoch from
// SOURCE_DATE_EPOCH or else the commit's time, Source from the module path.
func Defaults(ctx context.Context, o Options) (Options, error) {
	var err error
	if o.Version == "" {
		if o.Version, err = ChartAppVersion(o.Root); err != nil {
			return o, err
		}
	}
	git := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = o.Root
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("git %s in %s: %w (pass the value explicitly outside a git checkout)", strings.Join(args, " "), o.Root, err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	if o.Revision == "" {
		if o.Revision, err = git("rev-parse", "HEAD"); err != nil {
			return o, err
		}
		if _, err := git("diff", "--quiet", "HEAD", "--"); err != nil {
			o.Revision += "-dirty"
		}
	}
	if o.Epoch.IsZero() {
		s := os.Getenv("SOURCE_DATE_EPOCH")
		if s == "" {
			if s, err = git("log", "-1", "--format=%ct"); err != nil {
				return o, err
			}
		}
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return o, fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970", s)
		}
		o.Epoch = time.Unix(sec, 0).UTC()
	}
	if o.Source == "" {
		o.Source = Source
	}
	return o, nil
}
