#!/usr/bin/env bash
# SANDBOX WORKAROUND — for Nezha's own development sandbox only; never install this for users.
#
# The sandbox's capability bounding set lacks CAP_SYS_RESOURCE, so runc cannot apply the full
# capability set of a privileged container (kind nodes are privileged) and fails with
# "unable to apply caps: operation not permitted". Registered with dockerd as its default
# runtime (and used as runc by containerd inside the sandbox's kind node image), this wrapper
# removes CAP_SYS_RESOURCE from every capability list it is handed before calling runc unchanged:
# the OCI bundle's config.json of `runc create|run --bundle DIR`, and the process.json of
# `runc exec --process FILE` (`docker exec --privileged`, which kind uses for everything).
# See README.md here.
set -euo pipefail

# drop_cap FILE JQ_PATH: rewrite FILE in place without CAP_SYS_RESOURCE under JQ_PATH.
drop_cap() {
  local file=$1 path=$2 tmp
  [ -f "$file" ] || return 0
  tmp=$(mktemp "$file.XXXXXX")
  jq "($path // {}) |= with_entries(.value |= map(select(. != \"CAP_SYS_RESOURCE\")))" "$file" >"$tmp"
  mv "$tmp" "$file"
}

args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[$i]}" in
    --bundle | -b) drop_cap "${args[$((i + 1))]:-}/config.json" .process.capabilities ;;
    --bundle=*) drop_cap "${args[$i]#--bundle=}/config.json" .process.capabilities ;;
    --process | -p) drop_cap "${args[$((i + 1))]:-}" .capabilities ;;
    --process=*) drop_cap "${args[$i]#--process=}" .capabilities ;;
  esac
done
exec runc "$@"
