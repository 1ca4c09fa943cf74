package controller

import (
	"sort"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// nodesToAvoid returns the nodes whose RailNode reports one of rails unhealthy (down, or in
// spec.quarantinedRails: put there by an administrator or by internal/quarantine): new workers
// of the job are kept off them (builder.AvoidNodes), so a restart after rail loss does not land
// on the same broken NIC.
func nodesToAvoid(railNodes []nezhav1.RailNode, rails []string) []string {
	var out []string
	for i := range railNodes {
		for _, rail := range rails {
			if ok, found := railNodes[i].RailHealthy(rail); found && !ok {
				out = append(out, railNodes[i].Name)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}
