// Package netstatus reads a worker's rail attachments from the Multus
// k8s.v1.cni.cncf.io/network-status annotation.
package netstatus

import (
	"encoding/json"
	"fmt"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/builder"
)

// Parse decodes a network-status annotation value. An empty value means Multus has not written
// it yet (nil, nil).
func Parse(annotation string) ([]nadv1.NetworkStatus, error) {
	if annotation == "" {
		return nil, nil
	}
	var st []nadv1.NetworkStatus
	if err := json.Unmarshal([]byte(annotation), &st); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", nadv1.NetworkStatusAnnot, err)
	}
	return st, nil
}

// RailAttachments matches network-status entries to rails by the fixed interface name each rail
// was requested with, and returns one WorkerRailStatus per rail found plus the names of the rails
// with no interface. Health is left for the caller (it comes from RailNodes).
func RailAttachments(statuses []nadv1.NetworkStatus, rails []builder.Rail) (found []nezhav1.WorkerRailStatus, missing []string) {
	byIface := make(map[string]*nadv1.NetworkStatus, len(statuses))
	for i := range statuses {
		byIface[statuses[i].Interface] = &statuses[i]
	}
	for _, r := range rails {
		s, ok := byIface[r.Interface]
		// Multus names a network "namespace/name"; accept a bare name too (older releases).
		if !ok || (s.Name != r.NetworkNamespace+"/"+r.NetworkName && s.Name != r.NetworkName) {
			missing = append(missing, r.Name)
			continue
		}
		w := nezhav1.WorkerRailStatus{
			Name:      r.Name,
			Interface: s.Interface,
			IPs:       append([]string(nil), s.IPs...),
			MAC:       s.Mac,
		}
		if d := s.DeviceInfo; d != nil && d.Pci != nil {
			w.PCIAddress = d.Pci.PciAddress
			w.RDMADevice = d.Pci.RdmaDevice
		}
		found = append(found, w)
	}
	return found, missing
}
