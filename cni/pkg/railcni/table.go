package railcni

import (
	"fmt"
	"hash/fnv"
)

// Derived routing tables live in one recognisable block, 0x4E5A0000-0x4E5AFFFF ("NZ" in the high
// half), far from the small ids administrators and other plugins (sbr starts at 100) pick. The low
// 16 bits are the FNV-1a hash of the pod interface name, folded to 16 bits, so the table depends
// only on the interface name: DEL finds it again without any state, even after the state file is
// lost. Two interfaces of one pod colliding is detected by ADD (the table already routes through
// another link) and reported with a hint to set "table"; the names Nezha uses (nz0..nz15) and
// Multus' defaults (net1..net16) are checked collision-free by a unit test.
const (
	derivedTableBase = 0x4E5A0000
	derivedTableMask = 0xFFFF
)

// Reserved kernel routing tables (include/uapi/linux/rtnetlink.h).
const (
	tableUnspec  = 0
	tableDefault = 253
	tableMain    = 254
	tableLocal   = 255
)

// DerivedTable is the routing table of pod interface ifname when the config sets no "table".
func DerivedTable(ifname string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(ifname)) // hash.Hash never fails
	sum := h.Sum32()
	return derivedTableBase | ((sum ^ (sum >> 16)) & derivedTableMask)
}

func validateTable(t uint32) error {
	switch t {
	case tableUnspec:
		return fmt.Errorf("0 is not a routing table")
	case tableDefault, tableMain, tableLocal:
		return fmt.Errorf("%d is a reserved kernel table (253 default, 254 main, 255 local)", t)
	}
	return nil
}
