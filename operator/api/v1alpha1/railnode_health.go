package v1alpha1

import "slices"

// Healthy is the one definition of "this rail works on this node" shared by the rail agent (which
// counts healthyRailCount) and the operator (which degrades jobs): the link is operationally up,
// or "unknown" as virtual links report, and has carrier.
func (s *RailInterfaceStatus) Healthy() bool {
	return s.Carrier && (s.OperState == LinkUp || s.OperState == LinkUnknown)
}

// RailHealthy reports whether rail (a RailClass name) is usable on this node. found is false when
// the RailNode has no entry for the rail (the agent has not seen it, or the node lacks it).
func (n *RailNode) RailHealthy(rail string) (healthy, found bool) {
	if slices.Contains(n.Spec.QuarantinedRails, rail) {
		return false, true
	}
	for i := range n.Status.Rails {
		if n.Status.Rails[i].Name == rail {
			return n.Status.Rails[i].Healthy(), true
		}
	}
	return false, false
}

// InterfaceForNode returns the host interface name a selector names on node, or "" when the
// selector goes by PCI address (resolved on the node) or the node is missing from perNode.
func (h *HostInterfaceSelector) InterfaceForNode(node string) string {
	if h.Name != "" {
		return h.Name
	}
	return h.PerNode[node]
}
