package railcni

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// attachmentState is what ADD is about to change on one attachment: the rules it adds (their
// table and sources, so DEL removes exactly those even when an administrator gave two rails one
// "table", and even when the interface is gone) and the original sysctls and MTU. It is written
// before the first change, so DEL after a half-done ADD still undoes everything.
type attachmentState struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifname"`
	// Table is the routing table of the attachment.
	Table uint32 `json:"table"`
	// RuleSources are the "from" prefixes of the attachment's rules (CIDR strings).
	RuleSources []string `json:"ruleSources"`
	// OriginalSysctls maps a per-interface IPv4 conf key (rp_filter, ...) to its value before ADD.
	OriginalSysctls map[string]string `json:"originalSysctls,omitempty"`
	// OriginalMTU is the MTU before ADD; 0 when ADD did not change it.
	OriginalMTU int `json:"originalMTU,omitempty"`
}

// stateStore keeps one JSON file per attachment under <dataDir>/<network name>/, so GC of one
// network never touches another network's attachments.
type stateStore struct {
	dir string
}

func newStateStore(dataDir, network string) (*stateStore, error) {
	if network == "" || strings.ContainsAny(network, "/\x00") || network == "." || network == ".." {
		return nil, configError(fmt.Errorf("%s: config field \"name\": %q cannot name a state directory", PluginName, network))
	}
	return &stateStore{dir: filepath.Join(dataDir, network)}, nil
}

func (s *stateStore) path(containerID, ifname string) string {
	return filepath.Join(s.dir, stateFileName(containerID, ifname))
}

// stateFileName keys an attachment by container ID and interface name joined with ":", which
// neither may contain (utils.ValidateContainerID, utils.ValidateInterfaceName): one file per
// attachment, never shared. The former "_" joined ambiguously ("a_b"+"c" and "a"+"b_c").
func stateFileName(containerID, ifname string) string {
	return containerID + ":" + ifname + ".json"
}

// legacyStateFileName is the ambiguous key of earlier releases, still read by DEL so an upgrade
// does not strand an attachment's rules; its record is believed only when its own containerID
// and ifname fields are the attachment's.
func legacyStateFileName(containerID, ifname string) string {
	return containerID + "_" + ifname + ".json"
}

// load returns the state of an attachment, or nil when none was recorded.
func (s *stateStore) load(containerID, ifname string) (*attachmentState, error) {
	st, err := s.read(s.path(containerID, ifname))
	if st != nil || err != nil {
		return st, err
	}
	st, err = s.read(filepath.Join(s.dir, legacyStateFileName(containerID, ifname)))
	if st == nil || err != nil || st.ContainerID != containerID || st.IfName != ifname {
		return nil, err
	}
	return st, nil
}

func (s *stateStore) read(path string) (*attachmentState, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read attachment state: %w", err)
	}
	st := &attachmentState{}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("decode attachment state %s: %w", path, err)
	}
	return st, nil
}

// save writes the state atomically (temp file + rename): a crash mid-write must not leave a
// truncated file that makes every later DEL fail.
func (s *stateStore) save(st *attachmentState) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode attachment state: %w", err)
	}
	final := s.path(st.ContainerID, st.IfName)
	tmp, err := os.CreateTemp(s.dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("write attachment state: %w", err)
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write attachment state: %w", err)
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write attachment state: %w", err)
	}
	return nil
}

func (s *stateStore) remove(containerID, ifname string) error {
	err := os.Remove(s.path(containerID, ifname))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove attachment state: %w", err)
	}
	legacy := filepath.Join(s.dir, legacyStateFileName(containerID, ifname))
	if st, err := s.read(legacy); err == nil && st != nil && st.ContainerID == containerID && st.IfName == ifname {
		if err := os.Remove(legacy); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove attachment state: %w", err)
		}
	}
	return nil
}

// gc removes the state of every attachment not in keep (keyed by stateFileName). It returns the
// file names it removed.
func (s *stateStore) gc(keep map[string]bool) ([]string, error) {
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list attachment state: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".json") || keep[name] {
			continue
		}
		if err := os.Remove(filepath.Join(s.dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, name)
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("remove stale attachment state: %w", err)
	}
	return removed, nil
}

// checkWritable is STATUS: the plugin can only do its job if it can record state.
func (s *stateStore) checkWritable() error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("state directory %s: %w", s.dir, err)
	}
	f, err := os.CreateTemp(s.dir, ".status-*")
	if err != nil {
		return fmt.Errorf("state directory %s is not writable: %w", s.dir, err)
	}
	name := f.Name()
	_ = f.Close()
	return os.Remove(name)
}
