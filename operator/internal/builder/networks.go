package builder

import (
	"encoding/json"
	"fmt"
	"strings"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
)

// NetworksAnnotation returns the Multus networks annotation for a worker: the networks the user
// template already asked for (kept first, so their interface names do not move) followed by one
// element per rail with its fixed interface name.
func NetworksAnnotation(existing string, rails []Rail) (string, error) {
	elems, err := parseNetworkSelection(existing)
	if err != nil {
		return "", fmt.Errorf("annotation %s: %w", nadv1.NetworkAttachmentAnnot, err)
	}
	for _, r := range rails {
		for _, e := range elems {
			if e.InterfaceRequest == r.Interface {
				return "", fmt.Errorf("annotation %s: interface %q is reserved for rail %q",
					nadv1.NetworkAttachmentAnnot, r.Interface, r.Name)
			}
		}
		elems = append(elems, nadv1.NetworkSelectionElement{
			Name:             r.NetworkName,
			Namespace:        r.NetworkNamespace,
			InterfaceRequest: r.Interface,
		})
	}
	out, err := json.Marshal(elems)
	if err != nil {
		return "", err
	}
	return string(out), nil
}

// parseNetworkSelection reads both forms Multus accepts: a JSON list of selection elements, or a
// comma-separated list of "[namespace/]name[@interface]".
func parseNetworkSelection(s string) ([]nadv1.NetworkSelectionElement, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	if strings.HasPrefix(s, "[") {
		var elems []nadv1.NetworkSelectionElement
		if err := json.Unmarshal([]byte(s), &elems); err != nil {
			return nil, fmt.Errorf("invalid JSON list: %w", err)
		}
		return elems, nil
	}
	var elems []nadv1.NetworkSelectionElement
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		var e nadv1.NetworkSelectionElement
		if name, iface, ok := strings.Cut(item, "@"); ok {
			item, e.InterfaceRequest = name, iface
		}
		if ns, name, ok := strings.Cut(item, "/"); ok {
			e.Namespace, item = ns, name
		}
		if item == "" {
			return nil, fmt.Errorf("element %q has no network name", item)
		}
		e.Name = item
		elems = append(elems, e)
	}
	return elems, nil
}
