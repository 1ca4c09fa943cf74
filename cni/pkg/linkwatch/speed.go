package linkwatch

import (
	"fmt"
	"unsafe"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// SpeedReader reads negotiated link speeds with the ethtool ioctl. The ioctl resolves the
// interface name in the namespace of the socket, so one socket opened in the watched namespace
// serves every later call from any thread (sysfs would show the namespace that mounted it).
type SpeedReader struct {
	fd int
}

// NewSpeedReader opens the socket in the namespace at nsPath ("" = the caller's).
func NewSpeedReader(nsPath string) (*SpeedReader, error) {
	open := func() (int, error) { return unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0) }
	var fd int
	var err error
	if nsPath == "" {
		fd, err = open()
	} else {
		err = ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
			var e error
			fd, e = open()
			return e
		})
	}
	if err != nil {
		return nil, fmt.Errorf("open ethtool socket: %w", err)
	}
	return &SpeedReader{fd: fd}, nil
}

// Close releases the socket.
func (r *SpeedReader) Close() error { return unix.Close(r.fd) }

// ethtoolCmd is struct ethtool_cmd (linux/ethtool.h), the legacy ETHTOOL_GSET reply; the kernel
// fills it from get_link_ksettings for drivers that only implement the new interface.
type ethtoolCmd struct {
	Cmd           uint32
	Supported     uint32
	Advertising   uint32
	Speed         uint16
	Duplex        uint8
	Port          uint8
	PhyAddress    uint8
	Transceiver   uint8
	Autoneg       uint8
	MdioSupport   uint8
	Maxtxpkt      uint32
	Maxrxpkt      uint32
	SpeedHi       uint16
	EthTpMdix     uint8
	EthTpMdixCtrl uint8
	LpAdvertising uint32
	Reserved      [2]uint32
}

// ifreqData is struct ifreq with the ifr_data member of the union.
type ifreqData struct {
	Name [unix.IFNAMSIZ]byte
	Data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

const (
	ethtoolGSet  = 0x00000001
	speedUnknown = 0xFFFFFFFF
)

// SpeedMbps returns the link speed in Mbit/s, 0 when the driver reports none (link down, or a
// virtual device without a speed).
func (r *SpeedReader) SpeedMbps(ifname string) (int64, error) {
	if len(ifname) >= unix.IFNAMSIZ {
		return 0, fmt.Errorf("interface name %q too long", ifname)
	}
	cmd := &ethtoolCmd{Cmd: ethtoolGSet}
	req := &ifreqData{Data: unsafe.Pointer(cmd)}
	copy(req.Name[:], ifname)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(r.fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(req))); errno != 0 {
		if errno == unix.EOPNOTSUPP {
			return 0, nil
		}
		return 0, fmt.Errorf("ethtool GSET %s: %w", ifname, errno)
	}
	speed := uint32(cmd.SpeedHi)<<16 | uint32(cmd.Speed)
	if speed == speedUnknown || speed == 0xFFFF {
		return 0, nil
	}
	return int64(speed), nil
}
