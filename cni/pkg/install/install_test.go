package install

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBinaryReplacesAtomically(t *testing.T) {
	srcDir, dstDir := t.TempDir(), t.TempDir()
	from := filepath.Join(srcDir, "nezha-rail")
	if err := os.WriteFile(from, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dstDir, "nezha-rail"), []byte("old"), 0o755); err != nil {
		t.Fatal(err)
	}
	dst, err := Binary(from, dstDir)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(dst)
	fi, _ := os.Stat(dst)
	if string(b) != "new" || fi.Mode().Perm() != 0o755 {
		t.Errorf("installed %q mode %v, want \"new\" 0755", b, fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(dstDir)
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}

func TestBinaryErrorsNameTheFlag(t *testing.T) {
	if _, err := Binary(filepath.Join(t.TempDir(), "missing"), t.TempDir()); err == nil || !strings.Contains(err.Error(), "--from") {
		t.Errorf("missing source: %v", err)
	}
	from := filepath.Join(t.TempDir(), "nezha-rail")
	_ = os.WriteFile(from, nil, 0o600)
	if _, err := Binary(from, filepath.Join(t.TempDir(), "nope")); err == nil || !strings.Contains(err.Error(), "--to") {
		t.Errorf("missing target dir: %v", err)
	}
}
