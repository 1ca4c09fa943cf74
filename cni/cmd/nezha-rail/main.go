// Command nezha-rail is the Nezha rail CNI plugin: chained after the plugin that creates a rail
// interface, it gives the interface its own routing table and a "from <rail-ip>" rule so traffic
// from each rail address leaves through its own rail. See cni/README.md for the configuration.
package main

import (
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/nezha-project/nezha/cni/pkg/railcni"
)

func main() {
	skel.PluginMainFuncs(railcni.Funcs, version.PluginSupports(railcni.SupportedVersions...), "nezha-rail: Nezha multi-rail policy routing")
}
