// Package railcni is the nezha-rail CNI plugin: chained after the plugin that creates a rail
// interface (macvlan, ipvlan, sriov, host-device), it gives that interface source-based policy
// routing inside the pod so traffic from each rail address leaves through its own rail, even when
// several rails share one subnet.
package railcni

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// PluginName is the CNI "type" of this plugin and the name of its binary.
const PluginName = "nezha-rail"

// Defaults of the plugin's configuration fields (see NetConf).
const (
	// DefaultRulePriority puts the "from <rail-ip>" rules after the local table (priority 0) so
	// local delivery still works, and well before main (32766) so they win over the main table's
	// same-subnet routes of the other rails.
	DefaultRulePriority = 10000
	// DefaultDataDir holds one small state file per attachment recording what ADD changed
	// (original sysctls and MTU) so DEL can put it back.
	DefaultDataDir = "/var/lib/cni/nezha-rail"
	// EnvDataRoots lists (colon-separated) the directories a config's dataDir may lie under.
	// The config comes from a NetworkAttachmentDefinition, which namespace users can write; the
	// plugin runs as root on the node, so without this a NAD could make it write anywhere. Set
	// in the container runtime's environment (it is not under the NAD's control).
	EnvDataRoots = "NEZHA_RAIL_DATA_ROOTS"
)

// DefaultDataRoots are the allowed dataDir roots when EnvDataRoots is unset.
var DefaultDataRoots = []string{"/var/lib/cni", "/run/cni"}

// Bounds checked on the configuration.
const (
	minRulePriority = 1     // 0 is the local-table rule
	maxRulePriority = 32765 // 32766 is main: ours must come first
	minMTU          = 68    // IPv4 minimum
	maxMTU          = 65535
)

// NetConf is the plugin's configuration, a CNI network config (one element of a conflist).
//
//	{
//	  "type": "nezha-rail",
//	  "table": 1000,          // optional routing table id; default derived from the ifname
//	  "rulePriority": 10000,  // optional priority of the "from <ip>" rules
//	  "mtu": 9000,            // optional MTU for the rail interface
//	  "dataDir": "/var/lib/cni/nezha-rail", // optional state directory
//	  "forwardAccept": true   // optional: host iptables ACCEPT rules for the rail addresses
//	}
type NetConf struct {
	types.NetConf

	// Table is the routing table holding this rail's routes. Unset: DerivedTable(ifname).
	Table *uint32 `json:"table,omitempty"`
	// RulePriority is the priority of the source rules. Unset: DefaultRulePriority.
	RulePriority *int `json:"rulePriority,omitempty"`
	// MTU, when non-zero, is set on the rail interface.
	MTU int `json:"mtu,omitempty"`
	// DataDir is where per-attachment state lives. Unset: DefaultDataDir.
	DataDir string `json:"dataDir,omitempty"`
	// ForwardAccept adds ACCEPT rules for the rail's addresses to the host's FORWARD chain (via
	// ForwardChain), for bridged rails on hosts whose FORWARD policy is DROP (see forward.go).
	ForwardAccept bool `json:"forwardAccept,omitempty"`

	// prevResult converted to the current result version (nil when absent).
	prev *current.Result
}

// ErrNoPrevResult is returned by ADD and CHECK when the plugin is not chained (CNI error code 7,
// invalid network configuration).
var ErrNoPrevResult error = types.NewError(types.ErrInvalidNetworkConfig,
	PluginName+": prevResult is missing: the plugin must be chained after the plugin that creates the rail interface (macvlan, ipvlan, sriov, host-device)", "")

// ParseConfig decodes and validates stdin of any CNI command and converts prevResult, if any,
// to the current result version. Its errors carry CNI error code 7 (invalid network
// configuration), as the CNI spec's "Error" section asks, not the generic 999.
func ParseConfig(stdin []byte) (*NetConf, error) {
	conf, err := parseConfig(stdin)
	if err != nil {
		return nil, configError(err)
	}
	return conf, nil
}

// configError is err as a CNI error with code 7 (invalid network configuration).
func configError(err error) error {
	return types.NewError(types.ErrInvalidNetworkConfig, err.Error(), "")
}

func parseConfig(stdin []byte) (*NetConf, error) {
	conf := &NetConf{}
	if err := json.Unmarshal(stdin, conf); err != nil {
		return nil, fmt.Errorf("%s: parse network configuration: %w", PluginName, err)
	}
	if err := conf.validate(); err != nil {
		return nil, err
	}
	if conf.RawPrevResult != nil {
		if err := version.ParsePrevResult(&conf.NetConf); err != nil {
			return nil, fmt.Errorf("%s: config field \"prevResult\": %w", PluginName, err)
		}
		prev, err := current.NewResultFromResult(conf.PrevResult)
		if err != nil {
			return nil, fmt.Errorf("%s: config field \"prevResult\": convert to version %s: %w", PluginName, current.ImplementedSpecVersion, err)
		}
		conf.prev = prev
	}
	return conf, nil
}

func (c *NetConf) validate() error {
	if c.Table != nil {
		if err := validateTable(*c.Table); err != nil {
			return fmt.Errorf("%s: config field \"table\": %w", PluginName, err)
		}
	}
	if c.RulePriority != nil && (*c.RulePriority < minRulePriority || *c.RulePriority > maxRulePriority) {
		return fmt.Errorf("%s: config field \"rulePriority\": %d is outside %d..%d (0 is the local table's rule, 32766 the main table's)",
			PluginName, *c.RulePriority, minRulePriority, maxRulePriority)
	}
	if c.MTU != 0 && (c.MTU < minMTU || c.MTU > maxMTU) {
		return fmt.Errorf("%s: config field \"mtu\": %d is outside %d..%d", PluginName, c.MTU, minMTU, maxMTU)
	}
	if c.DataDir != "" {
		if err := confined(c.DataDir, dataRoots()); err != nil {
			return fmt.Errorf("%s: config field \"dataDir\": %w", PluginName, err)
		}
	}
	return nil
}

func dataRoots() []string {
	if v := os.Getenv(EnvDataRoots); v != "" {
		return strings.Split(v, ":")
	}
	return DefaultDataRoots
}

// confined accepts an absolute, clean path at or below one of roots (no "..", no duplicate or
// trailing slashes, no NUL), so a state file can never land outside them.
func confined(path string, roots []string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path || strings.ContainsRune(path, 0) {
		return fmt.Errorf("%q must be an absolute, clean path", path)
	}
	for _, root := range roots {
		root = filepath.Clean(root)
		if root != "/" && filepath.IsAbs(root) && (path == root || strings.HasPrefix(path, root+"/")) {
			return nil
		}
	}
	return fmt.Errorf("%q is outside the allowed directories %v (%s)", path, roots, EnvDataRoots)
}

// TableFor is the routing table used for the interface ifname under this config.
func (c *NetConf) TableFor(ifname string) uint32 {
	if c.Table != nil {
		return *c.Table
	}
	return DerivedTable(ifname)
}

// Priority is the priority of the source rules.
func (c *NetConf) Priority() int {
	if c.RulePriority != nil {
		return *c.RulePriority
	}
	return DefaultRulePriority
}

// StateDir is the directory of this network's attachment state files.
func (c *NetConf) StateDir() string {
	dir := c.DataDir
	if dir == "" {
		dir = DefaultDataDir
	}
	return dir
}
