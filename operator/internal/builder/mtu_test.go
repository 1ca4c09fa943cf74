package builder

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWithRailMTU(t *testing.T) {
	cases := []struct {
		name, config, want, wantErr string
	}{
		{"set on the chained nezha-rail entry",
			`{"cniVersion":"1.0.0","name":"r0","plugins":[{"type":"macvlan","master":"eth1"},{"type":"nezha-rail","table":1000}]}`,
			`{"cniVersion":"1.0.0","name":"r0","plugins":[{"type":"macvlan","master":"eth1"},{"type":"nezha-rail","table":1000,"mtu":9000}]}`, ""},
		{"nezha-rail chained when the list has none",
			`{"cniVersion":"1.0.0","name":"r0","plugins":[{"type":"macvlan","master":"eth1"}]}`,
			`{"cniVersion":"1.0.0","name":"r0","plugins":[{"type":"macvlan","master":"eth1"},{"type":"nezha-rail","mtu":9000}]}`, ""},
		{"a single-plugin config becomes a list",
			`{"cniVersion":"1.0.0","name":"r0","type":"macvlan","master":"eth1","ipam":{"type":"dhcp"}}`,
			`{"cniVersion":"1.0.0","name":"r0","plugins":[{"type":"macvlan","master":"eth1","ipam":{"type":"dhcp"}},{"type":"nezha-rail","mtu":9000}]}`, ""},
		{"the same mtu already there is fine",
			`{"cniVersion":"1.0.0","name":"r0","plugins":[{"type":"nezha-rail","mtu":9000}]}`,
			`{"cniVersion":"1.0.0","name":"r0","plugins":[{"type":"nezha-rail","mtu":9000}]}`, ""},
		{"a different mtu is a conflict",
			`{"cniVersion":"1.0.0","name":"r0","plugins":[{"type":"macvlan"},{"type":"nezha-rail","mtu":1500}]}`, "",
			`9000 conflicts with spec.network.config plugins[1] (nezha-rail) "mtu": 1500`},
		{"bad plugins", `{"cniVersion":"1.0.0","plugins":{}}`, "", "spec.network.config plugins"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := withRailMTU(tc.config, 9000)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var g, w any
			if err := json.Unmarshal([]byte(got), &g); err != nil {
				t.Fatal(err)
			}
			_ = json.Unmarshal([]byte(tc.want), &w)
			if d := cmp.Diff(w, g); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}
