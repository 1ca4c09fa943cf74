package main

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// epoch is the timestamp of every file, the layer and the image config: the same inputs must give
// the same image digest, whenever and wherever they are built.
var epoch = time.Unix(0, 0).UTC()

// entryKind is what an entry becomes in the layer.
type entryKind int

const (
	kindDir entryKind = iota
	kindFile
	kindSymlink
)

// entry is one path in the image's filesystem.
type entry struct {
	path   string // cleaned, relative to the image root, no leading slash ("bin/sh")
	kind   entryKind
	mode   fs.FileMode // permission bits only
	src    string      // kindFile: host file to copy
	size   int64       // kindFile: size at plan time
	target string      // kindSymlink: link target, stored verbatim
}

// layerSpec collects the entries of the one layer, refusing two sources for the same path so a
// typo in the flags cannot silently shadow a file.
type layerSpec struct {
	entries map[string]entry
}

func newLayerSpec() *layerSpec { return &layerSpec{entries: map[string]entry{}} }

// imagePath turns a user-given destination ("/bin/sh", "etc/") into a cleaned relative path.
func imagePath(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("empty path")
	}
	clean := strings.TrimPrefix(path.Clean("/"+p), "/")
	if clean == "" {
		return "", fmt.Errorf("path %q is the image root", p)
	}
	return clean, nil
}

func (l *layerSpec) add(e entry) error {
	if old, ok := l.entries[e.path]; ok {
		// The same directory reached twice (a --dir and a --file below it) is harmless.
		if old.kind == kindDir && e.kind == kindDir {
			return nil
		}
		return fmt.Errorf("/%s is given twice", e.path)
	}
	l.entries[e.path] = e
	return nil
}

// addFile copies the host file src to dst in the image, keeping its permission bits.
func (l *layerSpec) addFile(src, dst string) error {
	p, err := imagePath(dst)
	if err != nil {
		return fmt.Errorf("--file %s: %w", src, err)
	}
	st, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("--file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("--file %s: not a regular file", src)
	}
	return l.add(entry{path: p, kind: kindFile, mode: st.Mode().Perm(), src: src})
}

// addSymlink creates the symlink at linkPath pointing to target.
func (l *layerSpec) addSymlink(linkPath, target string) error {
	p, err := imagePath(linkPath)
	if err != nil {
		return fmt.Errorf("--symlink %s: %w", linkPath, err)
	}
	if target == "" {
		return fmt.Errorf("--symlink %s: empty target", linkPath)
	}
	return l.add(entry{path: p, kind: kindSymlink, mode: 0o777, target: target})
}

// addDir copies the tree under root to dest in the image ("/" for the image root): regular
// files, directories and symlinks. Anything else (devices, sockets, fifos) has no business in
// our images and is an error.
func (l *layerSpec) addDir(root, dest string) error {
	prefix := ""
	if strings.Trim(dest, "/") != "" {
		p, err := imagePath(dest)
		if err != nil {
			return fmt.Errorf("--dir %s: %w", root, err)
		}
		if err := l.add(entry{path: p, kind: kindDir, mode: 0o755}); err != nil {
			return fmt.Errorf("--dir %s: %w", root, err)
		}
		prefix = p + "/"
	}
	st, err := os.Stat(root)
	if err != nil {
		return fmt.Errorf("--dir: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("--dir %s: not a directory", root)
	}
	return filepath.WalkDir(root, func(hostPath string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("--dir %s: %w", root, err)
		}
		rel, err := filepath.Rel(root, hostPath)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		rel = prefix + filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return fmt.Errorf("--dir %s: %w", root, err)
		}
		switch mode := info.Mode(); {
		case mode.IsDir():
			return l.add(entry{path: rel, kind: kindDir, mode: mode.Perm()})
		case mode.IsRegular():
			return l.add(entry{path: rel, kind: kindFile, mode: mode.Perm(), src: hostPath})
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(hostPath)
			if err != nil {
				return fmt.Errorf("--dir %s: %w", root, err)
			}
			return l.add(entry{path: rel, kind: kindSymlink, mode: 0o777, target: target})
		default:
			return fmt.Errorf("--dir %s: %s is a %s, only files, directories and symlinks are packed", root, rel, mode.Type())
		}
	})
}

// plan returns every entry of the layer in tar order: sorted paths with every parent directory
// present. Conflicts and unreadable files are found here, before anything is written.
func (l *layerSpec) plan() ([]entry, error) {
	all := map[string]entry{}
	for p, e := range l.entries {
		if e.kind == kindFile {
			st, err := os.Stat(e.src)
			if err != nil {
				return nil, err
			}
			e.size = st.Size()
		}
		all[p] = e
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if existing, ok := all[dir]; ok {
				if existing.kind != kindDir {
					return nil, fmt.Errorf("/%s is both a file and the parent of /%s", dir, p)
				}
				continue
			}
			if explicit, ok := l.entries[dir]; ok {
				if explicit.kind != kindDir {
					return nil, fmt.Errorf("/%s is both a file and the parent of /%s", dir, p)
				}
				all[dir] = explicit
				continue
			}
			all[dir] = entry{path: dir, kind: kindDir, mode: 0o755}
		}
	}
	paths := make([]string, 0, len(all))
	for p := range all {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	entries := make([]entry, 0, len(paths))
	for _, p := range paths {
		entries = append(entries, all[p])
	}
	return entries, nil
}

// writeTar streams the planned entries as an uncompressed tar: root-owned, every timestamp at
// epoch. Files are read while writing (never held in memory), so large images are fine; a file
// that changed size since plan() makes the tar writer fail rather than produce a bad layer.
func writeTar(w io.Writer, entries []entry) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.path, Mode: int64(e.mode), ModTime: epoch, Format: tar.FormatUSTAR}
		switch e.kind {
		case kindDir:
			hdr.Typeflag, hdr.Name = tar.TypeDir, e.path+"/"
		case kindSymlink:
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.target
		case kindFile:
			hdr.Typeflag, hdr.Size = tar.TypeReg, e.size
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("/%s: %w", e.path, err)
		}
		if e.kind == kindFile {
			if err := copyFile(tw, e.src); err != nil {
				return fmt.Errorf("/%s: %w", e.path, err)
			}
		}
	}
	return tw.Close()
}

func copyFile(w io.Writer, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}
