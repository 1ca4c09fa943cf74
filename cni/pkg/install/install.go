// Package install copies the nezha-rail plugin binary into the node's CNI bin directory, as the
// agent DaemonSet's init container does. The copy is written to a temporary file in the target
// directory and renamed over the old binary, so a runtime executing the plugin concurrently sees
// either the old or the new file, never a half-written one.
package install

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Binary copies the file at from into dir under its own base name, atomically, mode 0755.
func Binary(from, dir string) (string, error) {
	src, err := os.Open(from)
	if err != nil {
		return "", fmt.Errorf("install-cni --from: %w", err)
	}
	defer src.Close()
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		return "", fmt.Errorf("install-cni --to %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, ".nezha-install-*")
	if err != nil {
		return "", fmt.Errorf("install-cni: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	_, cerr := io.Copy(tmp, src)
	if err := errors.Join(cerr, tmp.Chmod(0o755), tmp.Sync(), tmp.Close()); err != nil {
		return "", fmt.Errorf("install-cni: write %s: %w", tmp.Name(), err)
	}
	dst := filepath.Join(dir, filepath.Base(from))
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", fmt.Errorf("install-cni: %w", err)
	}
	return dst, nil
}
