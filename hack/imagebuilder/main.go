// Command imagebuilder packs files into a one-layer container image and writes it as a
// docker-archive tarball, the format `ctr -n k8s.io images import` loads. Nezha's local cluster
// has no registry and no Docker engine: the pause image, test images and (later) the operator,
// agent and runtime images are all built this way. Same inputs give the same image digest.
//
//	imagebuilder --tag nezha.local/pause:1 --output pause.tar \
//	    --file bin/pause:/pause --entrypoint '["/pause"]'
//	imagebuilder --tag nezha.local/busybox:1 --output bb.tar --file /bin/busybox:/bin/busybox \
//	    --symlink /bin/sh=busybox --env PATH=/bin --cmd '["sh"]'
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"strings"
)

// listFlag collects a flag given several times.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// options is the parsed command line.
type options struct {
	output, tag     string
	dirs, files     listFlag
	symlinks        listFlag
	envs, labels    listFlag
	entrypoint, cmd string
	cfg             imageConfig
}

func parseArgs(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("imagebuilder", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.output, "output", "", "docker-archive tarball to write (required)")
	fs.StringVar(&o.tag, "tag", "", "image reference REGISTRY/REPOSITORY:TAG, e.g. nezha.local/pause:1 (required)")
	fs.Var(&o.dirs, "dir", "SRC[:DST] host directory whose tree is copied to DST, default the image root (repeatable)")
	fs.Var(&o.files, "file", "SRC[:DST] host file to copy to DST, default /basename(SRC) (repeatable)")
	fs.Var(&o.symlinks, "symlink", "LINK=TARGET symlink to create in the image (repeatable)")
	fs.StringVar(&o.entrypoint, "entrypoint", "", `entrypoint as a JSON array, e.g. '["/pause"]'`)
	fs.StringVar(&o.cmd, "cmd", "", `default arguments as a JSON array, e.g. '["sleep","3600"]'`)
	fs.Var(&o.envs, "env", "NAME=VALUE environment variable (repeatable)")
	fs.Var(&o.labels, "label", "KEY=VALUE image label (repeatable)")
	fs.StringVar(&o.cfg.WorkingDir, "workdir", "", "working directory")
	fs.StringVar(&o.cfg.User, "user", "", "user (and group) the process runs as")
	fs.StringVar(&o.cfg.OS, "os", "linux", "image OS")
	fs.StringVar(&o.cfg.Arch, "arch", runtime.GOARCH, "image architecture")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (every input is a flag)", fs.Arg(0))
	}
	if o.output == "" {
		return nil, errors.New("--output is required")
	}
	if o.tag == "" {
		return nil, errors.New("--tag is required")
	}
	if len(o.dirs)+len(o.files)+len(o.symlinks) == 0 {
		return nil, errors.New("nothing to pack: give --dir, --file or --symlink")
	}
	var err error
	if o.cfg.Entrypoint, err = jsonArgv("--entrypoint", o.entrypoint); err != nil {
		return nil, err
	}
	if o.cfg.Cmd, err = jsonArgv("--cmd", o.cmd); err != nil {
		return nil, err
	}
	for _, e := range o.envs {
		k, _, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--env %q: want NAME=VALUE", e)
		}
		o.cfg.Env = append(o.cfg.Env, e)
	}
	for _, l := range o.labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--label %q: want KEY=VALUE", l)
		}
		if o.cfg.Labels == nil {
			o.cfg.Labels = map[string]string{}
		}
		o.cfg.Labels[k] = v
	}
	return o, nil
}

// jsonArgv parses an exec-form argv ('["/bin/x","-v"]'); empty means unset.
func jsonArgv(flagName, v string) ([]string, error) {
	if v == "" {
		return nil, nil
	}
	var argv []string
	if err := json.Unmarshal([]byte(v), &argv); err != nil {
		return nil, fmt.Errorf(`%s %q: want a JSON array of strings, e.g. '["/pause"]': %w`, flagName, v, err)
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("%s: empty array", flagName)
	}
	return argv, nil
}

func (o *options) layer() (*layerSpec, error) {
	l := newLayerSpec()
	for _, d := range o.dirs {
		src, dst, _ := strings.Cut(d, ":")
		if src == "" {
			return nil, fmt.Errorf("--dir %q: empty source", d)
		}
		if err := l.addDir(src, dst); err != nil {
			return nil, err
		}
	}
	for _, f := range o.files {
		src, dst, ok := strings.Cut(f, ":")
		if !ok {
			dst = "/" + path.Base(src)
		}
		if src == "" {
			return nil, fmt.Errorf("--file %q: empty source", f)
		}
		if err := l.addFile(src, dst); err != nil {
			return nil, err
		}
	}
	for _, s := range o.symlinks {
		link, target, ok := strings.Cut(s, "=")
		if !ok {
			return nil, fmt.Errorf("--symlink %q: want LINK=TARGET", s)
		}
		if err := l.addSymlink(link, target); err != nil {
			return nil, err
		}
	}
	return l, nil
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parseArgs(args, stderr)
	if err != nil {
		return err
	}
	l, err := o.layer()
	if err != nil {
		return err
	}
	entries, err := l.plan()
	if err != nil {
		return err
	}
	img, err := buildImage(entries, o.cfg)
	if err != nil {
		return err
	}
	// Write to a fresh temporary file next to the target and rename it into place: a failed
	// build never leaves a truncated archive that `ctr images import` would half-load, and two
	// builds of the same image racing each other never interleave their writes.
	if err := writeArchive(o.output, o.tag, img); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s %s\n", o.output, o.tag, digest)
	return nil
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "imagebuilder:", err)
		}
		os.Exit(2)
	}
}
