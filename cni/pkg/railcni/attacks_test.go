package railcni

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
)

// Attacks on the plugin's inputs (docs/security.md "CNI plugin"): whoever can make the runtime
// run a command chooses CNI_IFNAME and CNI_CONTAINERID, and the plugin runs as root.

// TestCraftedIfnameNeverReachesTheFileSystem: a DEL whose CNI_IFNAME climbs out of dataDir used
// to delete "<dataDir>/<net>/<cid>_../../victim.json"'s target; now every command refuses the
// name (CNI error 4, invalid environment variables) before touching a file.
func TestCraftedIfnameNeverReachesTheFileSystem(t *testing.T) {
	root := t.TempDir()
	dataDir := filepath.Join(root, "data")
	victim := filepath.Join(root, "victim.json")
	if err := os.WriteFile(victim, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := []byte(`{"cniVersion":"1.0.0","name":"rail0","type":"nezha-rail","dataDir":"` + dataDir + `"}`)
	for name, args := range map[string]*skel.CmdArgs{
		"ifname":      {ContainerID: "c1", IfName: "../../../victim", StdinData: conf},
		"containerID": {ContainerID: "../x", IfName: "nz0", StdinData: conf},
	} {
		for cmd, run := range map[string]func(*skel.CmdArgs) error{"ADD": CmdAdd, "DEL": CmdDel, "CHECK": CmdCheck} {
			err := run(args)
			var cniErr *types.Error
			if !errors.As(err, &cniErr) || cniErr.Code != types.ErrInvalidEnvironmentVariables {
				t.Errorf("%s with a crafted %s: error %v, want CNI error %d", cmd, name, err, types.ErrInvalidEnvironmentVariables)
			}
		}
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("the file outside dataDir is gone: %v", err)
	}
}

// TestStateKeyIsUnambiguous: attachments ("a_b", "c") and ("a", "b_c") once shared one state
// file, so the second ADD's record was lost and its DEL removed the other's. Now each has its own.
func TestStateKeyIsUnambiguous(t *testing.T) {
	s, err := newStateStore(t.TempDir(), "rail0")
	if err != nil {
		t.Fatal(err)
	}
	one := &attachmentState{ContainerID: "a_b", IfName: "c", Table: 1}
	two := &attachmentState{ContainerID: "a", IfName: "b_c", Table: 2}
	for _, st := range []*attachmentState{one, two} {
		if err := s.save(st); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.remove("a", "b_c"); err != nil {
		t.Fatal(err)
	}
	got, err := s.load("a_b", "c")
	if err != nil || got == nil || got.Table != 1 {
		t.Fatalf("the other attachment's record after DEL of (a, b_c): %+v, %v", got, err)
	}
}

// TestLegacyStateIsReadOnlyForItsOwnAttachment: a record written under the old "_" key by an
// earlier release is still found by its own attachment's DEL, and never by the other attachment
// whose old key was the same.
func TestLegacyStateIsReadOnlyForItsOwnAttachment(t *testing.T) {
	dir := t.TempDir()
	s, err := newStateStore(dir, "rail0")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	legacy := filepath.Join(s.dir, "a_b_c.json")
	if err := os.WriteFile(legacy, []byte(`{"containerID":"a_b","ifname":"c","table":9}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if st, err := s.load("a", "b_c"); err != nil || st != nil {
		t.Fatalf("(a, b_c) read (a_b, c)'s legacy record: %+v, %v", st, err)
	}
	if err := s.remove("a", "b_c"); err != nil {
		t.Fatal(err)
	}
	if st, err := s.load("a_b", "c"); err != nil || st == nil || st.Table != 9 {
		t.Fatalf("(a_b, c) lost its legacy record: %+v, %v", st, err)
	}
	if err := s.remove("a_b", "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(legacy); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("legacy record left after its DEL: %v", err)
	}
}

// TestConfigErrorsAreCode7: a bad network configuration is CNI error 7 (invalid network
// configuration, CNI spec "Error"), not the generic 999.
func TestConfigErrorsAreCode7(t *testing.T) {
	for _, conf := range []string{
		`{"cniVersion":"1.0.0","name":"rail0","type":"nezha-rail","mtu":10}`,
		`{"cniVersion":"1.0.0","name":"rail0","type":"nezha-rail","table":"x"}`,
		`{"cniVersion":"1.0.0","name":"..","type":"nezha-rail"}`,
		`{"cniVersion":"1.0.0","name":"rail0","type":"nezha-rail"}`, // ADD without prevResult
	} {
		err := CmdAdd(&skel.CmdArgs{ContainerID: "c1", IfName: "nz0", Netns: "/proc/self/ns/net", StdinData: []byte(conf)})
		var cniErr *types.Error
		if !errors.As(err, &cniErr) || cniErr.Code != types.ErrInvalidNetworkConfig {
			t.Errorf("%s: error %v, want CNI error 7", conf, err)
		}
	}
}
