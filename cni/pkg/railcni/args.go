package railcni

import (
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/utils"
)

// validateArgs checks CNI_CONTAINERID and CNI_IFNAME with the CNI library's own rules before
// either becomes part of a state file's path or a rule comment. skel checks them too when the
// plugin runs as a binary; the commands check again because they are also called directly (the
// tests, other Go callers), and a DEL with ifname "../../x" must never reach the file system.
func validateArgs(args *skel.CmdArgs) error {
	if err := utils.ValidateContainerID(args.ContainerID); err != nil {
		return err
	}
	if err := utils.ValidateInterfaceName(args.IfName); err != nil {
		return err
	}
	return nil
}
