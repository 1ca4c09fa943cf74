package charts

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestValuesSchemaIsClosed: every object in values.schema.json that lists properties refuses
// others (additionalProperties: false), so a misspelt or unknown value fails `helm install`
// naming it, and every value in values.yaml must have a schema entry (helm lint, run by
// TestChartLints, validates the defaults against the schema).
func TestValuesSchemaIsClosed(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	var walk func(node map[string]any, path string)
	walk = func(node map[string]any, path string) {
		props, ok := node["properties"].(map[string]any)
		if !ok {
			return
		}
		if node["additionalProperties"] != false {
			t.Errorf("schema object %q accepts unknown keys (set additionalProperties: false)", path)
		}
		for k, v := range props {
			if child, ok := v.(map[string]any); ok {
				walk(child, path+"."+k)
			}
		}
	}
	walk(schema, "")
}
