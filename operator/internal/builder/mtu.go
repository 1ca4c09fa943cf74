package builder

import (
	"encoding/json"
	"fmt"
)

// railPluginType is Nezha's chained CNI plugin (cni/pkg/railcni): per-rail routing, and the MTU
// of the pod's rail interface when its config carries "mtu" (restored on DEL, checked on CHECK).
const railPluginType = "nezha-rail"

// withRailMTU returns the CNI config with RailClass.spec.mtu applied through the nezha-rail
// plugin: set on its entry, or a nezha-rail entry chained last when the config has none (a
// single-plugin config becomes a plugin list). Whatever plugin creates the interface, the MTU is
// set the same way. An entry that already asks for a different MTU is a conflict, not a choice
// to make silently.
func withRailMTU(config string, mtu int32) (string, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(config), &top); err != nil {
		return "", fmt.Errorf("spec.network.config is not a JSON object: %w", err)
	}
	var plugins []map[string]json.RawMessage
	if raw, ok := top["plugins"]; ok {
		if err := json.Unmarshal(raw, &plugins); err != nil {
			return "", fmt.Errorf("spec.network.config plugins: %w", err)
		}
	} else {
		single := map[string]json.RawMessage{}
		for k, v := range top {
			if k != "cniVersion" && k != "name" {
				single[k] = v
				delete(top, k)
			}
		}
		plugins = []map[string]json.RawMessage{single}
	}
	mtuJSON, _ := json.Marshal(mtu)
	found := false
	for i, p := range plugins {
		var typ string
		if err := json.Unmarshal(p["type"], &typ); err != nil || typ != railPluginType {
			continue
		}
		if raw, ok := p["mtu"]; ok {
			var have int64
			if err := json.Unmarshal(raw, &have); err != nil || have != int64(mtu) {
				return "", fmt.Errorf("%d conflicts with spec.network.config plugins[%d] (%s) \"mtu\": %s", mtu, i, railPluginType, raw)
			}
		}
		p["mtu"] = mtuJSON
		found = true
	}
	if !found {
		typeJSON, _ := json.Marshal(railPluginType)
		plugins = append(plugins, map[string]json.RawMessage{"type": typeJSON, "mtu": mtuJSON})
	}
	list, err := json.Marshal(plugins)
	if err != nil {
		return "", err
	}
	top["plugins"] = list
	out, err := json.Marshal(top)
	if err != nil {
		return "", err
	}
	return string(out), nil
}
