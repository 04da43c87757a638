// Command image builds the condisagg, pd-sidecar and vllm-sim images (deploy/image) into an OCI
// layout and one docker-archive tarball per image: `make image` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/condisagg/condisagg/deploy/image"
)

func main() {
	var o image.Options
	flag.StringVar(&o.Root, "root", "..", "repository root")
	flag.StringVar(&o.Out, "out", "../bin/images", "output directory (replaced oci/ layout, <name>-<version>.tar archives)")
	flag.StringVar(&o.Version, "version", "", "image tag and version label (default: the chart's appVersion)")
	flag.StringVar(&o.Revision, "revision", "", "revision label (default: git rev-parse HEAD, -dirty with uncommitted changes)")
	flag.StringVar(&o.Source, "source", "", "source label (default "+image.Source+")")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o image.Options) error {
	var err error
	if o.Root, err = filepath.Abs(o.Root); err != nil {
		return err
	}
	if o, err = image.Defaults(ctx, o); err != nil {
		return err
	}
	o.Log = os.Stdout
	_, err = image.Build(ctx, o)
	return err
}
