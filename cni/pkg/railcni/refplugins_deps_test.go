package railcni_test

// The CNI 1.1.0 tests build the macvlan and static reference plugins from the pinned
// containernetworking/plugins module (see TestMain). These blank imports are the packages those
// commands need, so `go mod tidy` keeps their requirements in go.mod/go.sum.
import (
	_ "github.com/containernetworking/plugins/pkg/ip"
	_ "github.com/containernetworking/plugins/pkg/ipam"
	_ "github.com/containernetworking/plugins/pkg/utils/buildversion"
	_ "github.com/containernetworking/plugins/pkg/utils/sysctl"
)
