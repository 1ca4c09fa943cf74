package railcni

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// railSysctls are the per-interface IPv4 settings a rail needs when several rails of a pod share
// one subnet. Order matters only for readable errors.
//
//   - rp_filter=2 (loose): a reply to a rail address may arrive on another rail of the same
//     subnet (the peer's ARP cache or a switch decides); strict reverse-path filtering would drop
//     it because the policy route back to the sender goes out of a different interface. The
//     kernel uses max(all, interface), so 2 here wins over a strict all=1.
//   - arp_ignore=1: answer ARP for an address only on the interface that holds it, so peers learn
//     the MAC of the right rail and send to it.
//   - arp_announce=2: use the rail's own address as the source of its ARP requests, so peers do
//     not bind another rail's address to this rail's MAC.
var railSysctls = []struct{ key, value string }{
	{"rp_filter", "2"},
	{"arp_ignore", "1"},
	{"arp_announce", "2"},
}

// ipv4ConfPath is the per-interface IPv4 sysctl of the network namespace of the calling thread
// (/proc/sys/net is resolved against the opener's namespace).
func ipv4ConfPath(ifname, key string) string {
	return filepath.Join("/proc/sys/net/ipv4/conf", ifname, key)
}

func readIfSysctl(ifname, key string) (string, error) {
	b, err := os.ReadFile(ipv4ConfPath(ifname, key))
	if err != nil {
		return "", fmt.Errorf("read net.ipv4.conf.%s.%s: %w", ifname, key, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func writeIfSysctl(ifname, key, value string) error {
	if err := os.WriteFile(ipv4ConfPath(ifname, key), []byte(value), 0o644); err != nil {
		return fmt.Errorf("set net.ipv4.conf.%s.%s=%s: %w", ifname, key, value, err)
	}
	return nil
}

// readRailSysctls returns the current values of railSysctls on ifname.
func readRailSysctls(ifname string) (map[string]string, error) {
	out := make(map[string]string, len(railSysctls))
	for _, s := range railSysctls {
		v, err := readIfSysctl(ifname, s.key)
		if err != nil {
			return nil, err
		}
		out[s.key] = v
	}
	return out, nil
}
