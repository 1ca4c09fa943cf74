package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const tiny = `---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
spec:
  versions:
  - name: v1
    schema:
      openAPIV3Schema:
        description: top
        properties:
          spec:
            description: own field
            properties:
              template:
                description: kept (the path's own)
                properties:
                  description:
                    description: dropped, but the field named description stays
                    type: string
                  inner:
                    description: dropped
                    type: string
                type: object
            type: object
        type: object
`

func TestTrimDropsOnlyBelowThePath(t *testing.T) {
	out, err := Trim([]byte(tiny), []string{"spec.template"})
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{"---\n", "description: top", "description: own field", "description: kept", "  description:\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "dropped") {
		t.Errorf("descriptions below the path survived:\n%s", s)
	}
	if _, err := Trim([]byte(tiny), []string{"spec.templat"}); err == nil || !strings.Contains(err.Error(), `no field "templat"`) {
		t.Errorf("a missing path must be an error, got %v", err)
	}
}

// TestCommittedCRDsFitClientSideApply: `kubectl apply` (client-side) stores the whole object as
// JSON in the last-applied-configuration annotation, and annotations are limited to 256 KiB.
func TestCommittedCRDsFitClientSideApply(t *testing.T) {
	_, self, _, _ := runtime.Caller(0)
	files, err := filepath.Glob(filepath.Join(filepath.Dir(self), "../../../config/crd/bases/*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs found: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var obj any
		if err := yaml.Unmarshal(data, &obj); err != nil {
			t.Fatal(err)
		}
		j, _ := json.Marshal(obj)
		if len(j) > 200*1024 {
			t.Errorf("%s: %d bytes as JSON; client-side apply allows 256 KiB of annotations (keep a margin)", filepath.Base(f), len(j))
		}
	}
}
