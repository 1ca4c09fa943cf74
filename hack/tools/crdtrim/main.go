// crdtrim drops the descriptions inside the Kubernetes types a CRD embeds (the MultiRailJob's
// worker pod template), keeping every description of Nezha's own fields. The generated
// MultiRailJob CRD is otherwise ~620 KB, mostly copies of core/v1 documentation, and a plain
// `kubectl apply` (client-side) refuses objects whose last-applied annotation exceeds 256 KiB.
// `kubectl explain pod.spec` still documents the embedded fields.
//
//	crdtrim FILE JSONPATH...   e.g. crdtrim crd.yaml spec.workers.template
//
// Paths are below each version's openAPIV3Schema, through "properties" (implied).
package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: crdtrim FILE PATH...   (PATH: dotted field path below openAPIV3Schema, e.g. spec.workers.template)")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "crdtrim:", err)
		os.Exit(1)
	}
}

func run(file string, paths []string) error {
	in, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	out, err := Trim(in, paths)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return os.WriteFile(file, out, 0o644)
}

// Trim returns the CRD YAML with descriptions removed below every path (the path's own
// description stays). A path that does not exist is an error: a renamed field must not silently
// bring the 600 KB back.
func Trim(in []byte, paths []string) ([]byte, error) {
	var crd map[string]any
	if err := yaml.Unmarshal(in, &crd); err != nil {
		return nil, err
	}
	spec, _ := crd["spec"].(map[string]any)
	versions, _ := spec["versions"].([]any)
	if len(versions) == 0 {
		return nil, fmt.Errorf("no spec.versions: not a CRD")
	}
	for _, v := range versions {
		version, _ := v.(map[string]any)
		schema, _ := version["schema"].(map[string]any)
		node, _ := schema["openAPIV3Schema"].(map[string]any)
		if node == nil {
			return nil, fmt.Errorf("version %v has no openAPIV3Schema", version["name"])
		}
		for _, p := range paths {
			target := node
			for _, field := range strings.Split(p, ".") {
				props, _ := target["properties"].(map[string]any)
				next, _ := props[field].(map[string]any)
				if next == nil {
					return nil, fmt.Errorf("version %v: no field %q on the way to %s", version["name"], field, p)
				}
				target = next
			}
			for k, child := range target {
				if k != "description" {
					dropDescriptions(child)
				}
			}
		}
	}
	out, err := yaml.Marshal(crd)
	if err != nil {
		return nil, err
	}
	// controller-gen starts its files with a document marker; keep the file's own first line.
	if bytes.HasPrefix(in, []byte("---\n")) {
		out = append([]byte("---\n"), out...)
	}
	return out, nil
}

func dropDescriptions(n any) {
	switch t := n.(type) {
	case map[string]any:
		// Only a schema's description (a string); a field that happens to be named
		// "description" is a schema (a map) under "properties" and stays.
		if _, ok := t["description"].(string); ok {
			delete(t, "description")
		}
		for _, c := range t {
			dropDescriptions(c)
		}
	case []any:
		for _, c := range t {
			dropDescriptions(c)
		}
	}
}
