package netstatus_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
	"github.com/nezha-project/nezha/operator/internal/builder"
	"github.com/nezha-project/nezha/operator/internal/netstatus"
)

// A network-status annotation as Multus writes it for a pod with a primary network, an SR-IOV
// rail (with device-info) and a macvlan rail.
const multusStatus = `[
 {"name":"cbr0","interface":"eth0","ips":["10.244.0.7"],"mac":"aa:bb:cc:00:00:01","default":true,"dns":{}},
 {"name":"ns/j-a","interface":"nz0","ips":["10.10.0.7"],"mac":"aa:bb:cc:00:00:02","dns":{},
  "device-info":{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:02.3","rdma-device":"mlx5_5"}}},
 {"name":"shared/rail-b","interface":"nz1","ips":["10.11.0.7","fd00::7"],"mac":"aa:bb:cc:00:00:03","dns":{}}
]`

func TestRailAttachments(t *testing.T) {
	rails := []builder.Rail{
		{Name: "a", Interface: "nz0", NetworkNamespace: "ns", NetworkName: "j-a"},
		{Name: "b", Interface: "nz1", NetworkNamespace: "shared", NetworkName: "rail-b"},
		{Name: "c", Interface: "nz2", NetworkNamespace: "ns", NetworkName: "j-c"},
	}
	st, err := netstatus.Parse(multusStatus)
	if err != nil {
		t.Fatal(err)
	}
	found, missing := netstatus.RailAttachments(st, rails)
	want := []nezhav1.WorkerRailStatus{
		{Name: "a", Interface: "nz0", IPs: []string{"10.10.0.7"}, MAC: "aa:bb:cc:00:00:02", PCIAddress: "0000:3b:02.3", RDMADevice: "mlx5_5"},
		{Name: "b", Interface: "nz1", IPs: []string{"10.11.0.7", "fd00::7"}, MAC: "aa:bb:cc:00:00:03"},
	}
	if d := cmp.Diff(want, found); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"c"}, missing); d != "" {
		t.Errorf("missing (-want +got):\n%s", d)
	}
}

func TestRailAttachmentsWrongNetworkOnInterface(t *testing.T) {
	// nz0 exists but carries another network: the rail is not attached.
	st, _ := netstatus.Parse(`[{"name":"ns/other","interface":"nz0","ips":["1.2.3.4"]}]`)
	_, missing := netstatus.RailAttachments(st, []builder.Rail{{Name: "a", Interface: "nz0", NetworkNamespace: "ns", NetworkName: "j-a"}})
	if len(missing) != 1 {
		t.Errorf("missing %v", missing)
	}
}

func TestParse(t *testing.T) {
	if st, err := netstatus.Parse(""); err != nil || st != nil {
		t.Errorf("empty: %v %v", st, err)
	}
	_, err := netstatus.Parse(`{"name":`)
	if err == nil || !strings.Contains(err.Error(), "k8s.v1.cni.cncf.io/network-status") {
		t.Errorf("error %v must name the annotation", err)
	}
}
