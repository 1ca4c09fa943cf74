package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestMain pins the umask: directory modes in the expected layers assume 0755 directories.
func TestMain(m *testing.M) {
	syscall.Umask(0o022)
	os.Exit(m.Run())
}

// writeTree creates files under dir; a value starting with "->" makes a symlink.
func writeTree(t *testing.T, dir string, files map[string]string, modes map[string]os.FileMode) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(content, "->"); ok {
			if err := os.Symlink(target, full); err != nil {
				t.Fatal(err)
			}
			continue
		}
		mode := modes[p]
		if mode == 0 {
			mode = 0o644
		}
		if err := os.WriteFile(full, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(full, mode); err != nil { // umask must not change what we test
			t.Fatal(err)
		}
	}
}

// layerEntry is what the test reads back from the layer for one path.
type layerEntry struct {
	Type    byte
	Mode    int64
	Content string
	Link    string
}

func readImage(t *testing.T, archive, tag string) (v1.Image, map[string]layerEntry) {
	t.Helper()
	ref, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(archive, &ref)
	if err != nil {
		t.Fatalf("reading %s back: %v", archive, err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("want one layer, got %d", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	entries := map[string]layerEntry{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !hdr.ModTime.Equal(time.Unix(0, 0)) || hdr.Uid != 0 || hdr.Gid != 0 {
			t.Errorf("%s: mtime %v uid %d gid %d, want epoch and root", hdr.Name, hdr.ModTime, hdr.Uid, hdr.Gid)
		}
		data, _ := io.ReadAll(tr)
		entries[hdr.Name] = layerEntry{Type: hdr.Typeflag, Mode: hdr.Mode, Content: string(data), Link: hdr.Linkname}
	}
	return img, entries
}

func TestBuildAndReadBack(t *testing.T) {
	tmp := t.TempDir()
	root := filepath.Join(tmp, "root")
	writeTree(t, root, map[string]string{
		"bin/app":       "#!/bin/sh\necho hi\n",
		"etc/app.conf":  "rails=2\n",
		"bin/app-alias": "->app",
	}, map[string]os.FileMode{"bin/app": 0o755})
	extra := filepath.Join(tmp, "pause-binary")
	writeTree(t, tmp, map[string]string{"pause-binary": "ELF..."}, map[string]os.FileMode{"pause-binary": 0o755})
	out := filepath.Join(tmp, "img.tar")

	var stdout, stderr bytes.Buffer
	err := run([]string{
		"--tag", "nezha.local/test:1", "--output", out,
		"--dir", root, "--file", extra + ":/opt/nezha/pause", "--symlink", "/bin/sh=/bin/app",
		"--entrypoint", `["/bin/app","--serve"]`, "--cmd", `["x"]`,
		"--env", "PATH=/bin", "--env", "NEZHA_RAILS=2", "--label", "org.nezha/part=test",
		"--workdir", "/opt", "--user", "65532",
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v (stderr %s)", err, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), out+" nezha.local/test:1 sha256:") {
		t.Errorf("stdout %q: want archive, tag and digest", stdout.String())
	}
	if left, _ := filepath.Glob(out + ".tmp*"); len(left) > 0 {
		t.Errorf("temporary archives left behind: %v", left)
	}
	if st, err := os.Stat(out); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("archive mode: %v %v, want 0644", st.Mode(), err)
	}

	img, entries := readImage(t, out, "nezha.local/test:1")
	want := map[string]layerEntry{
		"bin/":            {Type: tar.TypeDir, Mode: 0o755},
		"bin/app":         {Type: tar.TypeReg, Mode: 0o755, Content: "#!/bin/sh\necho hi\n"},
		"bin/app-alias":   {Type: tar.TypeSymlink, Mode: 0o777, Link: "app"},
		"bin/sh":          {Type: tar.TypeSymlink, Mode: 0o777, Link: "/bin/app"},
		"etc/":            {Type: tar.TypeDir, Mode: 0o755},
		"etc/app.conf":    {Type: tar.TypeReg, Mode: 0o644, Content: "rails=2\n"},
		"opt/":            {Type: tar.TypeDir, Mode: 0o755},
		"opt/nezha/":      {Type: tar.TypeDir, Mode: 0o755},
		"opt/nezha/pause": {Type: tar.TypeReg, Mode: 0o755, Content: "ELF..."},
	}
	if diff := cmp.Diff(want, entries); diff != "" {
		t.Errorf("layer contents (-want +got):\n%s", diff)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	wantCfg := v1.Config{
		Entrypoint: []string{"/bin/app", "--serve"},
		Cmd:        []string{"x"},
		Env:        []string{"PATH=/bin", "NEZHA_RAILS=2"},
		Labels:     map[string]string{"org.nezha/part": "test"},
		WorkingDir: "/opt",
		User:       "65532",
	}
	if diff := cmp.Diff(wantCfg, cf.Config); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	if !cf.Created.Time.Equal(time.Unix(0, 0)) {
		t.Errorf("created %v, want epoch", cf.Created.Time)
	}
	if len(cf.RootFS.DiffIDs) != 1 {
		t.Errorf("rootfs diff ids %v, want one", cf.RootFS.DiffIDs)
	}

	// The archive's manifest.json names the tag exactly as given: that is what containerd imports.
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(out) })
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"nezha.local/test:1"}, m[0].RepoTags); diff != "" {
		t.Errorf("RepoTags (-want +got):\n%s", diff)
	}
}

func TestSameInputsGiveSameDigest(t *testing.T) {
	tmp := t.TempDir()
	root := filepath.Join(tmp, "root")
	writeTree(t, root, map[string]string{"a/b/c": "x", "z": "y"}, nil)
	build := func(out string) string {
		var stdout bytes.Buffer
		if err := run([]string{"--tag", "nezha.local/det:1", "--output", out, "--dir", root, "--entrypoint", `["/z"]`},
			&stdout, io.Discard); err != nil {
			t.Fatal(err)
		}
		return strings.Fields(stdout.String())[2]
	}
	first := build(filepath.Join(tmp, "1.tar"))
	// A later build, with different file timestamps on the host, must not change the digest.
	later := time.Now().Add(time.Hour)
	for _, p := range []string{"a/b/c", "z", "a/b", "a"} {
		if err := os.Chtimes(filepath.Join(root, p), later, later); err != nil {
			t.Fatal(err)
		}
	}
	if second := build(filepath.Join(tmp, "2.tar")); second != first {
		t.Errorf("digest changed between identical builds: %s vs %s", first, second)
	}
	a, _ := os.ReadFile(filepath.Join(tmp, "1.tar"))
	b, _ := os.ReadFile(filepath.Join(tmp, "2.tar"))
	if !bytes.Equal(a, b) {
		t.Errorf("archives differ byte for byte")
	}
}

func TestBadInputNamesTheFlag(t *testing.T) {
	tmp := t.TempDir()
	writeTree(t, tmp, map[string]string{"f": "x", "d/g": "y"}, nil)
	fifoDir := filepath.Join(tmp, "withfifo")
	if err := os.MkdirAll(fifoDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(fifoDir, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(tmp, "f")
	out := filepath.Join(tmp, "out.tar")
	base := []string{"--tag", "nezha.local/bad:1", "--output", out}
	cases := map[string]struct {
		args []string
		want string
	}{
		"no output":         {[]string{"--tag", "nezha.local/bad:1", "--file", f}, "--output is required"},
		"no tag":            {[]string{"--output", out, "--file", f}, "--tag is required"},
		"nothing to pack":   {base, "nothing to pack"},
		"bad tag":           {[]string{"--tag", "Not A Tag", "--output", out, "--file", f}, "--tag"},
		"tag missing":       {[]string{"--tag", "nezha/operator", "--output", out, "--file", f}, "no tag after the repository"},
		"port, no tag":      {[]string{"--tag", "nezha.local:5000/op", "--output", out, "--file", f}, "no tag after the repository"},
		"entrypoint string": {append(append([]string{}, base...), "--file", f, "--entrypoint", "/pause"), "--entrypoint"},
		"entrypoint empty":  {append(append([]string{}, base...), "--file", f, "--entrypoint", "[]"), "--entrypoint: empty"},
		"cmd not strings":   {append(append([]string{}, base...), "--file", f, "--cmd", "[1]"), "--cmd"},
		"env no value":      {append(append([]string{}, base...), "--file", f, "--env", "PATH"), "--env"},
		"label no key":      {append(append([]string{}, base...), "--file", f, "--label", "=v"), "--label"},
		"missing file":      {append(append([]string{}, base...), "--file", filepath.Join(tmp, "nope")), "--file"},
		"file is a dir":     {append(append([]string{}, base...), "--file", filepath.Join(tmp, "d")), "not a regular file"},
		"missing dir":       {append(append([]string{}, base...), "--dir", filepath.Join(tmp, "nope")), "--dir"},
		"dir is a file":     {append(append([]string{}, base...), "--dir", f), "not a directory"},
		"fifo in dir":       {append(append([]string{}, base...), "--dir", fifoDir), "only files, directories and symlinks"},
		"symlink no target": {append(append([]string{}, base...), "--symlink", "/bin/sh"), "--symlink"},
		"same path twice":   {append(append([]string{}, base...), "--file", f+":/x", "--symlink", "/x=y"), "/x is given twice"},
		"file as parent":    {append(append([]string{}, base...), "--file", f+":/x", "--file", f+":/x/y"), "/x is both a file and the parent"},
		"root as dest":      {append(append([]string{}, base...), "--file", f+":/"), "image root"},
		"positional":        {append(append([]string{}, base...), "--file", f, "extra"), "unexpected argument"},
		"unknown flag":      {append(append([]string{}, base...), "--bogus"), "bogus"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := run(tc.args, io.Discard, &stderr)
			if err == nil {
				t.Fatalf("want an error containing %q, got none", tc.want)
			}
			if msg := err.Error() + stderr.String(); !strings.Contains(msg, tc.want) {
				t.Errorf("error %q, want it to contain %q", msg, tc.want)
			}
			if _, statErr := os.Stat(out); !os.IsNotExist(statErr) {
				t.Errorf("failed build left %s behind", out)
			}
		})
	}
}

// The pause image as local-cluster.sh builds it: its manifest must be valid JSON with the tag.
func TestManifestIsDockerArchive(t *testing.T) {
	tmp := t.TempDir()
	writeTree(t, tmp, map[string]string{"pause": "bin"}, map[string]os.FileMode{"pause": 0o755})
	out := filepath.Join(tmp, "pause.tar")
	if err := run([]string{"--tag", "nezha.local/pause:1", "--output", out, "--file", filepath.Join(tmp, "pause"),
		"--entrypoint", `["/pause"]`}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	fh, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	names := map[string]bool{}
	tr := tar.NewReader(fh)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[hdr.Name] = true
		if hdr.Name == "manifest.json" {
			var m []struct {
				Config           string
				RepoTags, Layers []string
			}
			if err := json.NewDecoder(tr).Decode(&m); err != nil {
				t.Fatalf("manifest.json: %v", err)
			}
			if len(m) != 1 || len(m[0].Layers) != 1 || m[0].RepoTags[0] != "nezha.local/pause:1" {
				t.Errorf("manifest.json %+v", m)
			}
		}
	}
	if !names["manifest.json"] {
		t.Errorf("no manifest.json in %v", names)
	}
}

// Files are streamed into the layer, not held in memory: a file larger than any pipe or copy
// buffer must come back byte for byte.
func TestLargeFileRoundTrips(t *testing.T) {
	tmp := t.TempDir()
	big := make([]byte, 3<<20+12345)
	for i := range big {
		big[i] = byte(i*7 + i>>11)
	}
	src := filepath.Join(tmp, "big.bin")
	if err := os.WriteFile(src, big, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "big.tar")
	if err := run([]string{"--tag", "nezha.local/big:1", "--output", out, "--file", src + ":/data/big.bin"},
		io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	_, entries := readImage(t, out, "nezha.local/big:1")
	if got := entries["data/big.bin"].Content; got != string(big) {
		t.Errorf("big file: got %d bytes, want %d identical bytes", len(got), len(big))
	}
}

func TestDirWithDestination(t *testing.T) {
	tmp := t.TempDir()
	pkg := filepath.Join(tmp, "pkg")
	writeTree(t, pkg, map[string]string{"nezha/__init__.py": "", "nezha/rails.py": "RAILS = 2\n"}, nil)
	out := filepath.Join(tmp, "py.tar")
	if err := run([]string{"--tag", "nezha.local/py:1", "--output", out, "--dir", pkg + ":/opt/python/",
		"--env", "PYTHONPATH=/opt/python"}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	_, entries := readImage(t, out, "nezha.local/py:1")
	want := map[string]layerEntry{
		"opt/":                         {Type: tar.TypeDir, Mode: 0o755},
		"opt/python/":                  {Type: tar.TypeDir, Mode: 0o755},
		"opt/python/nezha/":            {Type: tar.TypeDir, Mode: 0o755},
		"opt/python/nezha/__init__.py": {Type: tar.TypeReg, Mode: 0o644},
		"opt/python/nezha/rails.py":    {Type: tar.TypeReg, Mode: 0o644, Content: "RAILS = 2\n"},
	}
	if diff := cmp.Diff(want, entries); diff != "" {
		t.Errorf("layer contents (-want +got):\n%s", diff)
	}

	err := run([]string{"--tag", "nezha.local/py:1", "--output", out, "--dir", ":/opt"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--dir") {
		t.Errorf("empty --dir source: got %v, want an error naming --dir", err)
	}
}

// Two builds of the same image into the same file at once (two `local-cluster.sh up`s, two
// `make` runs) must leave one complete, readable archive.
func TestConcurrentBuildsOfOneArchive(t *testing.T) {
	tmp := t.TempDir()
	root := filepath.Join(tmp, "root")
	big := strings.Repeat("nezha", 400000)
	writeTree(t, root, map[string]string{"a": big, "b/c": big}, nil)
	out := filepath.Join(tmp, "same.tar")
	errs := make(chan error, 4)
	for i := 0; i < cap(errs); i++ {
		go func() {
			errs <- run([]string{"--tag", "nezha.local/same:1", "--output", out, "--dir", root}, io.Discard, io.Discard)
		}()
	}
	for i := 0; i < cap(errs); i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	_, entries := readImage(t, out, "nezha.local/same:1")
	if entries["a"].Content != big || entries["b/c"].Content != big {
		t.Errorf("archive content damaged by concurrent builds")
	}
	if left, _ := filepath.Glob(out + ".tmp*"); len(left) > 0 {
		t.Errorf("temporary archives left behind: %v", left)
	}
}

func TestOutputInMissingDirectoryNamesTheFlag(t *testing.T) {
	tmp := t.TempDir()
	writeTree(t, tmp, map[string]string{"f": "x"}, nil)
	err := run([]string{"--tag", "nezha.local/bad:1", "--output", filepath.Join(tmp, "no/such/dir/x.tar"),
		"--file", filepath.Join(tmp, "f")}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--output") {
		t.Errorf("got %v, want an error naming --output", err)
	}
}

// The chart names images without a registry ("nezha/operator:0.1.0"); the archive must carry
// that name exactly, as containerd and the kubelet normalise both sides the same way.
func TestTagWithoutRegistry(t *testing.T) {
	tmp := t.TempDir()
	writeTree(t, tmp, map[string]string{"op": "bin"}, map[string]os.FileMode{"op": 0o755})
	out := filepath.Join(tmp, "op.tar")
	if err := run([]string{"--tag", "nezha/operator:0.1.0", "--output", out, "--file", filepath.Join(tmp, "op")},
		io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(out) })
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"nezha/operator:0.1.0"}, m[0].RepoTags); diff != "" {
		t.Errorf("RepoTags (-want +got):\n%s", diff)
	}
}
