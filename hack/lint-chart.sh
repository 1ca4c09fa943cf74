#!/usr/bin/env bash
# Checks the rendered chart with kube-score, as an admin's pipeline would: on the oldest and the
# newest Kubernetes the chart claims, with each webhook-certificate mode, Kubeflow Trainer on and
# off. Any finding fails, except those a workload names in its kube-score/ignore annotation, each
# justified there and in charts/nezha/README.md "Linter findings". Usage: hack/lint-chart.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/versions.sh
source "$here/versions.sh"
chart="$here/../charts/nezha"
helm="$NEZHA_TOOLS_BIN/helm"
kube_score="$NEZHA_TOOLS_BIN/kube-score"
for tool in "$helm" "$kube_score"; do
  [ -x "$tool" ] || { echo "lint-chart: $tool missing: run hack/setup.sh" >&2; exit 1; }
done
oldest=${KUBE_OLDEST_VERSION#v}
newest=${KUBE_VERSION#v}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# existingSecret needs a CA the chart can parse; a throwaway one is enough to render.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=lint-chart \
  -keyout "$out/ca.key" -out "$out/ca.crt" 2>/dev/null
ca_bundle=$(base64 -w0 "$out/ca.crt")
# name | helm arguments
cases=(
  "selfSigned@$oldest|--kube-version $oldest"
  "selfSigned@$newest|--kube-version $newest --api-versions admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"
  "certManager+trainer@$newest|--kube-version $newest --set webhook.certificates.mode=certManager --set trainer.enabled=true"
  "existingSecret@$newest|--kube-version $newest --set webhook.certificates.mode=existingSecret --set webhook.certificates.existingSecret.name=nezha-webhook-tls --set webhook.certificates.existingSecret.caBundle=$ca_bundle"
)
failed=0
for c in "${cases[@]}"; do
  name=${c%%|*}
  read -r -a args <<<"${c#*|}"
  "$helm" template nezha "$chart" --namespace nezha-system "${args[@]}" >"$out/render.yaml"
  # ci format: one line per check; OK and SKIPPED (ignored or not applicable) are not findings.
  findings=$("$kube_score" score "$out/render.yaml" --output-format ci | grep -v -e '^\[OK\]' -e '^\[SKIPPED\]' || true)
  if [ -n "$findings" ]; then
    echo "lint-chart: $name: kube-score findings:" >&2
    echo "$findings" >&2
    failed=1
  else
    echo "lint-chart: $name: no findings"
  fi
done
exit $failed
