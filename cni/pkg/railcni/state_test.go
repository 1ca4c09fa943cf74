package railcni

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestStateStoreRoundTripAndGC(t *testing.T) {
	s, err := newStateStore(t.TempDir(), "rail0")
	if err != nil {
		t.Fatal(err)
	}
	if st, err := s.load("c1", "nz0"); err != nil || st != nil {
		t.Fatalf("load of nothing = %v, %v; want nil, nil", st, err)
	}
	want := &attachmentState{ContainerID: "c1", IfName: "nz0", Table: 7, RuleSources: []string{"10.0.0.1/32"},
		OriginalSysctls: map[string]string{"rp_filter": "1"}, OriginalMTU: 1500}
	for _, st := range []*attachmentState{want, {ContainerID: "c2", IfName: "nz0"}, {ContainerID: "c3", IfName: "nz1"}} {
		if err := s.save(st); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.load("c1", "nz0")
	if err != nil || got.Table != 7 || got.OriginalMTU != 1500 || got.OriginalSysctls["rp_filter"] != "1" || !slices.Equal(got.RuleSources, want.RuleSources) {
		t.Fatalf("load = %+v, %v; want %+v", got, err, want)
	}
	removed, err := s.gc(map[string]bool{stateFileName("c1", "nz0"): true})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if w := []string{"c2:nz0.json", "c3:nz1.json"}; !slices.Equal(removed, w) {
		t.Errorf("gc removed %q, want %q", removed, w)
	}
	if err := s.remove("c1", "nz0"); err != nil {
		t.Fatal(err)
	}
	if err := s.remove("c1", "nz0"); err != nil {
		t.Errorf("second remove: %v", err)
	}
}

func TestStateStoreRejectsUnusableNames(t *testing.T) {
	for _, name := range []string{"", "..", "a/b"} {
		if _, err := newStateStore(t.TempDir(), name); err == nil || !strings.Contains(err.Error(), `config field "name"`) {
			t.Errorf("newStateStore(%q): %v", name, err)
		}
	}
}

func TestStateStoreCorruptFileIsAnError(t *testing.T) {
	dir := t.TempDir()
	s, _ := newStateStore(dir, "rail0")
	if err := os.MkdirAll(filepath.Join(dir, "rail0"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.path("c", "nz0"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.load("c", "nz0"); err == nil || !strings.Contains(err.Error(), "decode attachment state") {
		t.Errorf("load of a corrupt file: %v", err)
	}
}
