package prober

import "testing"

// The runtime derives the same credential in C++ (runtime/tests/control/control_test.cc
// ControlCredentialTest holds the same vector): a change on one side alone breaks one test.
func TestControlCredentialMatchesTheRuntimesVector(t *testing.T) {
	token := []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	const want = "b0c6ee25b0f7e6197752d0359198a710aa1914ee42f53468e86d4ece96c1117d"
	if got := ControlCredential(token); got != want {
		t.Errorf("ControlCredential = %s, want %s", got, want)
	}
}
