package railcni

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestForwardChainLockIsExclusive: ensureChain's look-up-then-insert of the FORWARD jump runs
// under lockFile, so a second plugin process (another open file description) cannot take the
// lock until the first releases it; two first ADDs then insert one jump, not two.
func TestForwardChainLockIsExclusive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "forward.lock")
	unlock, err := lockFile(path)
	if err != nil {
		t.Fatal(err)
	}
	other, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("a second holder got the lock while the first held it: %v", err)
	}
	unlock()
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("the lock was not released: %v", err)
	}
}
