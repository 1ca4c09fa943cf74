// Package prereq is for tests that need something a developer laptop may lack (root, network
// namespaces, envtest binaries, reference CNI plugins): they skip there, but fail when CI=true,
// so a green CI run means every such test really ran.
package prereq

import (
	"fmt"
	"os"
	"testing"
)

// InCI reports whether the tests run in CI (CI=true, as .ci/run is called).
func InCI() bool { return os.Getenv("CI") == "true" }

// Missing skips the test on a laptop and fails it in CI, saying what is missing.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("prerequisite missing under CI=true (tests must run, not skip): %s", msg)
		return
	}
	t.Skip(msg)
}
