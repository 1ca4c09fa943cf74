// Package linkwatch observes the rail host interfaces: it subscribes to netlink link updates in
// one network namespace (the host's, or a test namespace), and turns a link into the facts the
// RailNode reports (operational state, carrier, speed, MTU, error counters).
package linkwatch

import (
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	nezhav1 "github.com/nezha-project/nezha/operator/api/v1alpha1"
)

// LinkState is what the agent knows about one interface at one moment.
type LinkState struct {
	Interface string
	Index     int
	OperState nezhav1.LinkOperState
	Carrier   bool
	SpeedMbps int64
	MTU       int32
	RxErrors  int64
	TxErrors  int64
	RxDropped int64
	TxDropped int64
}

// Healthy is the shared definition of a working rail (v1alpha1.RailInterfaceStatus.Healthy).
func (s LinkState) Healthy() bool {
	st := nezhav1.RailInterfaceStatus{OperState: s.OperState, Carrier: s.Carrier}
	return st.Healthy()
}

// StateOf reads a link as the kernel reported it in a netlink message or dump. Carrier comes
// from IFF_LOWER_UP, which the kernel computes when it builds the message; the operational state
// is updated by the kernel's linkwatch worker and can lag a carrier change slightly. An
// administratively down link is reported "down" at once, whatever operstate still says.
func StateOf(link netlink.Link) LinkState {
	a := link.Attrs()
	s := LinkState{
		Interface: a.Name,
		Index:     a.Index,
		OperState: operState(a.OperState),
		Carrier:   a.RawFlags&unix.IFF_UP != 0 && a.RawFlags&unix.IFF_LOWER_UP != 0,
		MTU:       int32(a.MTU),
	}
	if a.RawFlags&unix.IFF_UP == 0 {
		s.OperState = nezhav1.LinkDown
	}
	if st := a.Statistics; st != nil {
		s.RxErrors, s.TxErrors = int64(st.RxErrors), int64(st.TxErrors)
		s.RxDropped, s.TxDropped = int64(st.RxDropped), int64(st.TxDropped)
	}
	return s
}

func operState(o netlink.LinkOperState) nezhav1.LinkOperState {
	switch o {
	case netlink.OperUp:
		return nezhav1.LinkUp
	case netlink.OperDown:
		return nezhav1.LinkDown
	case netlink.OperDormant:
		return nezhav1.LinkDormant
	case netlink.OperLowerLayerDown:
		return nezhav1.LinkLowerLayerDown
	case netlink.OperNotPresent:
		return nezhav1.LinkNotPresent
	case netlink.OperTesting:
		return nezhav1.LinkTesting
	default:
		return nezhav1.LinkUnknown
	}
}
