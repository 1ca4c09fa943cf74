package prereq

import "testing"

// fakeT records what Missing did without ending the real test.
type fakeT struct {
	testing.TB
	fatal, skipped bool
}

func (f *fakeT) Helper()               {}
func (f *fakeT) Fatalf(string, ...any) { f.fatal = true }
func (f *fakeT) Skip(...any)           { f.skipped = true }

func TestMissingFailsInCIAndSkipsElsewhere(t *testing.T) {
	t.Setenv("CI", "true")
	f := &fakeT{}
	Missing(f, "needs %s", "root")
	if !f.fatal || f.skipped {
		t.Fatalf("under CI=true: fatal=%v skipped=%v, want a failure", f.fatal, f.skipped)
	}
	t.Setenv("CI", "")
	f = &fakeT{}
	Missing(f, "needs root")
	if f.fatal || !f.skipped {
		t.Fatalf("on a laptop: fatal=%v skipped=%v, want a skip", f.fatal, f.skipped)
	}
}
