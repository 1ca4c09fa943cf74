package builder

import (
	"encoding/json"
	"fmt"
	"strings"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// Rail is a RailClass resolved for one job: everything a worker needs to attach to it.
type Rail struct {
	// Name of the RailClass.
	Name string
	// Interface inside the pod (nz<i>).
	Interface string
	// Transport the runtime uses.
	Transport nezhav1.Transport
	// NetworkNamespace and NetworkName locate the NetworkAttachmentDefinition.
	NetworkNamespace string
	NetworkName      string
	// OwnNAD is true when the operator creates the NAD from the RailClass's inline config.
	OwnNAD bool
	// Config is the CNI config for an owned NAD.
	Config string
	// SRIOVResourceName is the device-plugin resource to request, or "".
	SRIOVResourceName string
	// ExpectedMbps is the RailClass's expectedBandwidthMbps (0 = not given): the runtime reports
	// the rail degraded when it measures far less, and seeds the split with it when it runs no
	// init probe.
	ExpectedMbps int64
}

// ResolveRails turns the job's RailClasses (in spec.rails order) into Rails. It fails, naming the
// RailClass and field, when a class is unusable; the caller reports that as a condition.
func ResolveRails(job *nezhav1.MultiRailJob, classes []*nezhav1.RailClass) ([]Rail, error) {
	rails := make([]Rail, 0, len(classes))
	for i, rc := range classes {
		r := Rail{
			Name:              rc.Name,
			Interface:         InterfaceName(i),
			Transport:         rc.Spec.Transport,
			SRIOVResourceName: rc.Spec.SRIOVResourceName,
		}
		if rc.Spec.ExpectedBandwidthMbps != nil {
			r.ExpectedMbps = *rc.Spec.ExpectedBandwidthMbps
		}
		if r.Transport == "" {
			r.Transport = nezhav1.TransportTCP
		}
		switch {
		case rc.Spec.Network.NADRef != nil:
			if rc.Spec.MTU != nil {
				return nil, fmt.Errorf("RailClass %q spec.mtu: cannot be applied to spec.network.nadRef %q, a NetworkAttachmentDefinition the operator does not own; set the MTU there or use spec.network.config",
					rc.Name, rc.Spec.Network.NADRef.Name)
			}
			r.NetworkName = rc.Spec.Network.NADRef.Name
			r.NetworkNamespace = rc.Spec.Network.NADRef.Namespace
			if r.NetworkNamespace == "" {
				r.NetworkNamespace = job.Namespace
			}
		case rc.Spec.Network.Config != "":
			if err := validateCNIConfig(rc.Spec.Network.Config); err != nil {
				return nil, fmt.Errorf("RailClass %q spec.network.config: %w", rc.Name, err)
			}
			r.OwnNAD = true
			r.Config = rc.Spec.Network.Config
			if rc.Spec.MTU != nil {
				cfg, err := withRailMTU(r.Config, *rc.Spec.MTU)
				if err != nil {
					return nil, fmt.Errorf("RailClass %q spec.mtu: %w", rc.Name, err)
				}
				r.Config = cfg
			}
			r.NetworkName = NADName(job.Name, rc.Name)
			r.NetworkNamespace = job.Namespace
		default:
			return nil, fmt.Errorf("RailClass %q spec.network: neither config nor nadRef is set", rc.Name)
		}
		rails = append(rails, r)
	}
	return rails, nil
}

// validateCNIConfig checks what Multus would reject only at pod start: the config must be a JSON
// object with a cniVersion and either a plugin type or a plugins list.
func validateCNIConfig(config string) error {
	var c struct {
		CNIVersion string            `json:"cniVersion"`
		Type       string            `json:"type"`
		Plugins    []json.RawMessage `json:"plugins"`
	}
	if err := json.Unmarshal([]byte(config), &c); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	if c.CNIVersion == "" {
		return fmt.Errorf("cniVersion is missing")
	}
	if c.Type == "" && len(c.Plugins) == 0 {
		return fmt.Errorf("neither type nor plugins is set")
	}
	return nil
}

// RailsEnv is the NEZHA_RAILS value: "name=iface:transport[@Mbit/s],..." in rail order.
func RailsEnv(rails []Rail) string {
	parts := make([]string, len(rails))
	for i, r := range rails {
		parts[i] = fmt.Sprintf("%s=%s:%s", r.Name, r.Interface, r.Transport)
		if r.ExpectedMbps > 0 {
			parts[i] += fmt.Sprintf("@%d", r.ExpectedMbps)
		}
	}
	return strings.Join(parts, ",")
}
