package webhook

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

var configPath = field.NewPath("spec", "network", "config")

func TestValidateCNIConfig(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		want         string // "" = valid; else a substring of the aggregate error
	}{
		{"macvlan", `{"cniVersion":"1.0.0","type":"macvlan","master":"eth1","ipam":{"type":"whereabouts"}}`, ""},
		{"conflist", `{"cniVersion":"1.0.0","name":"r0","plugins":[{"type":"macvlan"},{"type":"nezha-rail"}]}`, ""},
		{"not json", `{cniVersion: 1}`, "spec.network.config: Invalid value"},
		{"array", `[1,2]`, "not a JSON object"},
		{"null", `null`, "not a JSON object"},
		{"trailing", `{"cniVersion":"1.0.0","type":"x"} {}`, "trailing data"},
		{"no version", `{"type":"macvlan"}`, "spec.network.config[cniVersion]: Required value"},
		{"numeric version", `{"cniVersion":1.0,"type":"macvlan"}`, "spec.network.config[cniVersion]: Invalid value"},
		{"no type", `{"cniVersion":"1.0.0"}`, "spec.network.config[type]: Required value"},
		{"empty type", `{"cniVersion":"1.0.0","type":""}`, "spec.network.config[type]: Invalid value"},
		{"both", `{"cniVersion":"1.0.0","type":"a","plugins":[{"type":"b"}]}`, "not both"},
		{"empty plugins", `{"cniVersion":"1.0.0","plugins":[]}`, "spec.network.config[plugins]: Invalid value"},
		{"plugin without type", `{"cniVersion":"1.0.0","plugins":[{"type":"a"},{}]}`, "spec.network.config[plugins][1][type]: Required value"},
		{"name not string", `{"cniVersion":"1.0.0","type":"a","name":7}`, "spec.network.config[name]"},
		{"huge", `{"cniVersion":"1.0.0","type":"a","x":"` + strings.Repeat("a", MaxCNIConfigBytes) + `"}`, "Too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := ValidateCNIConfig(configPath, tc.config)
			got := errs.ToAggregate()
			if tc.want == "" {
				if got != nil {
					t.Fatalf("want valid, got %v", got)
				}
				return
			}
			if got == nil || !strings.Contains(got.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, got)
			}
		})
	}
}

// FuzzValidateCNIConfig: any string is judged (valid or a field error), never a panic, and the
// error message stays bounded whatever the input's size.
func FuzzValidateCNIConfig(f *testing.F) {
	for _, seed := range []string{
		`{"cniVersion":"1.0.0","type":"macvlan","master":"eth1"}`,
		`{"cniVersion":"0.4.0","plugins":[{"type":"a"},{"type":"b"}]}`,
		`{"cniVersion":"1.0.0"}`, `[]`, `null`, `"x"`, `{`, `{"type":{"a":1}}`, "",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, config string) {
		errs := ValidateCNIConfig(configPath, config)
		if agg := errs.ToAggregate(); agg != nil && len(agg.Error()) > 4096 {
			t.Fatalf("error message of %d bytes", len(agg.Error()))
		}
	})
}
