#!/usr/bin/env bash
# SANDBOX WORKAROUND — for Nezha's own development sandbox only; never install this for users.
#
# The sandbox's capability bounding set lacks CAP_SYS_RESOURCE, so runc cannot apply the full
# capability set of a privileged container (kind nodes are privileged) and fails with
# "unable to apply caps: operation not permitted". Registered with dockerd as its default
# runtime, this wrapper removes CAP_SYS_RESOURCE from every capability list of the OCI bundle's
# config.json before handing over to runc unchanged. See README.md here.
set -euo pipefail
bundle=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[$i]}" in
    --bundle | -b) bundle=${args[$((i + 1))]:-} ;;
    --bundle=*) bundle=${args[$i]#--bundle=} ;;
  esac
done
if [ -n "$bundle" ] && [ -f "$bundle/config.json" ]; then
  tmp=$(mktemp "$bundle/config.json.XXXXXX")
  jq '(.process.capabilities // {}) |= with_entries(.value |= map(select(. != "CAP_SYS_RESOURCE")))' \
    "$bundle/config.json" >"$tmp"
  mv "$tmp" "$bundle/config.json"
fi
exec runc "$@"
