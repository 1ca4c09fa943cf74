#!/usr/bin/env bash
# Build Nezha's three images as docker-archive tarballs, without a Docker engine or a registry:
#
#   hack/images.sh            build all three into build/images/ (no root)
#   hack/images.sh --list     print the tarball paths, one a line
#   hack/images.sh train-example   build only the training-example image (large; not part of the
#                             default build): nezha/train-example:<tag>, see build_train_example
#   hack/images.sh --list-train-example  print its tarball path
#   hack/images.sh push       push the three tarballs to $NEZHA_IMAGE_PREFIX/<name>:$NEZHA_IMAGE_TAG
#                             with crane (pinned in versions.sh, built by hack/setup.sh); prints
#                             each pushed reference with its digest and writes them to
#                             $NEZHA_IMAGES_OUT/digests.txt
#
#   build/images/operator.tar    nezha/operator:<tag>     /nezha-operator (static)
#   build/images/rail-agent.tar  nezha/rail-agent:<tag>   /nezha-rail-agent, /nezha-rail (static)
#   build/images/runtime.tar     nezha/runtime:<tag>      /opt/nezha/{bin,lib,include[,python]},
#                                the shared libraries nezha-bench/nezha-tune/nezha-nccl-harness need
#                                (as ldd names them, dynamic loader included) and a static busybox
#                                as /bin/sh
#   build/images/train-example.tar  nezha/train-example:<tag>  (only with `train-example`)
#                                Debian's python3.11, the pinned torch from the venv of
#                                hack/setup-torch.sh (only the libraries torch loads: ~2.9 GB, not
#                                the venv's 5.5 GB), the nezha package with its c10d backend from
#                                `make build-torch` (build/python-torch), torchrun, and
#                                examples/ in /opt/nezha/examples
#
# The contents match images/*/Dockerfile. Load them into the local cluster with
# `hack/local-cluster.sh load-image build/images/<name>.tar` (root).
#
# Tunables (env, default):
#   NEZHA_IMAGE_TAG       chart appVersion   tag of all three images
#   NEZHA_IMAGE_PREFIX    nezha              repository prefix (the chart's default image names);
#                                            `make images REGISTRY=host[:port][/path]` sets it to
#                                            REGISTRY/nezha (the chart's image.registry = REGISTRY)
#   NEZHA_RUNTIME_BUILD   build/runtime      CMake build dir with nezha-bench, nezha-tune, libnezha,
#                                            the NCCL plugin and nezha-nccl-harness
#                                            (`make build-runtime`); this script does not build it
#   NEZHA_IMAGES_OUT      build/images       where tarballs (and their staging trees) go
#   NEZHA_TORCH_BUILD     build/python-torch the nezha package built against the pinned torch
#                                            (`make build-torch`); train-example only
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PROG=images.sh
# shellcheck source=hack/versions.sh
source "$REPO/hack/versions.sh"
# shellcheck source=hack/lib/common.sh
source "$REPO/hack/lib/common.sh"

chart_app_version() { sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$REPO/charts/nezha/Chart.yaml"; }

NEZHA_IMAGE_TAG=${NEZHA_IMAGE_TAG:-$(chart_app_version)}
NEZHA_IMAGE_PREFIX=${NEZHA_IMAGE_PREFIX:-nezha}
NEZHA_RUNTIME_BUILD=${NEZHA_RUNTIME_BUILD:-$REPO/build/runtime}
NEZHA_IMAGES_OUT=${NEZHA_IMAGES_OUT:-$REPO/build/images}
NEZHA_TORCH_BUILD=${NEZHA_TORCH_BUILD:-$REPO/build/python-torch}

# Busybox applets linked into the runtime image: the operator's init container needs sh and cp;
# the rest make a worker pod debuggable (addresses, links, connectivity); awk, wget and timeout
# serve the chart's `helm test` pod (Debian's busybox 1.35 wget crashes on -T: use timeout).
# seq, nslookup and grep run training-operator's PyTorchJob wait-for-master init container (hack/kubeflow.sh).
RUNTIME_APPLETS=(sh cp ls cat mkdir env sleep echo ip ping hostname nslookup wc grep awk wget timeout seq)
BUSYBOX=/bin/busybox

validate() {
  validate_name
  local f
  for f in nezha-bench nezha-tune nezha-nccl-harness libnezha.so libnccl-net-nezha.so; do
    [ -e "$NEZHA_RUNTIME_BUILD/$f" ] ||
      fail "NEZHA_RUNTIME_BUILD: $NEZHA_RUNTIME_BUILD/$f is missing (run: make build-runtime)"
  done
  [ -x "$BUSYBOX" ] || fail "missing $BUSYBOX (Debian package busybox-static; run hack/setup.sh)"
  require_cmd go ldd
}

validate_name() {
  [[ $NEZHA_IMAGE_TAG =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] ||
    die "NEZHA_IMAGE_TAG (TAG): want a Docker tag ([A-Za-z0-9_.-], up to 128), got '$NEZHA_IMAGE_TAG'"
  # An optional registry host[:port]/, then a lowercase repository path.
  [[ $NEZHA_IMAGE_PREFIX =~ ^([A-Za-z0-9.-]+(:[0-9]+)?/)?[a-z0-9]+([._/-][a-z0-9]+)*$ ]] ||
    die "NEZHA_IMAGE_PREFIX (REGISTRY): want [host[:port]/]lowercase/path, got '$NEZHA_IMAGE_PREFIX'"
}

# push: each tarball to its name under NEZHA_IMAGE_PREFIX. The prefix must start with a registry
# host: a bare `nezha/...` would mean the default public registry, never what was meant here.
push() {
  validate_name
  local host=${NEZHA_IMAGE_PREFIX%%/*}
  [[ $NEZHA_IMAGE_PREFIX == */* && ($host == *.* || $host == *:* || $host == localhost) ]] ||
    die "push: NEZHA_IMAGE_PREFIX '$NEZHA_IMAGE_PREFIX' names no registry host (set REGISTRY=host[:port][/path], e.g. make push REGISTRY=registry.example:5000)"
  local crane="$NEZHA_TOOLS_BIN/crane-$CRANE_VERSION"
  [ -x "$crane" ] || fail "push: $crane is missing (run: hack/setup.sh)"
  local name tarball ref pushed digests=()
  for name in operator rail-agent runtime; do
    tarball=$NEZHA_IMAGES_OUT/$name.tar
    [ -f "$tarball" ] || fail "push: $tarball is missing (run: make images)"
    ref=$NEZHA_IMAGE_PREFIX/$name:$NEZHA_IMAGE_TAG
    # crane prints the pushed reference by digest (repo@sha256:...) on stdout.
    pushed=$("$crane" push "$tarball" "$ref") || fail "push: crane could not push $tarball to $ref"
    [[ $pushed == *@sha256:* ]] || fail "push: crane printed '$pushed', not a digest reference"
    echo "$ref ${pushed##*@}"
    digests+=("$ref ${pushed##*@}")
  done
  printf '%s\n' "${digests[@]}" >"$NEZHA_IMAGES_OUT/digests.txt"
  log "pushed 3 images; digests in $NEZHA_IMAGES_OUT/digests.txt"
}

imagebuilder() {
  (cd "$REPO" && go run ./hack/imagebuilder "$@")
}

# go_static OUTDIR PKG...: CGO-free, stripped binaries that run on an empty base image. The rail
# agent reports main.version in RailNode status.agentVersion: stamp it with the image tag.
go_static() {
  local out=$1
  shift
  (cd "$REPO" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$NEZHA_IMAGE_TAG" -o "$out/" "$@")
}

build_operator() {
  local stage=$OUT_STAGE/operator
  go_static "$stage" ./operator/cmd/nezha-operator
  imagebuilder --tag "$NEZHA_IMAGE_PREFIX/operator:$NEZHA_IMAGE_TAG" --output "$NEZHA_IMAGES_OUT/operator.tar" \
    --file "$stage/nezha-operator:/nezha-operator" --user 65532:65532 --entrypoint '["/nezha-operator"]'
}

build_rail_agent() {
  local stage=$OUT_STAGE/rail-agent
  go_static "$stage" ./cni/cmd/nezha-rail ./cni/cmd/nezha-rail-agent
  imagebuilder --tag "$NEZHA_IMAGE_PREFIX/rail-agent:$NEZHA_IMAGE_TAG" --output "$NEZHA_IMAGES_OUT/rail-agent.tar" \
    --file "$stage/nezha-rail:/nezha-rail" --file "$stage/nezha-rail-agent:/nezha-rail-agent" \
    --entrypoint '["/nezha-rail-agent"]'
}

# shared_libs BINARY...: "resolved-file image-path" per library ldd reports (vdso excluded), so
# each library lands where the binary's loader looks for it, as a regular file.
shared_libs() {
  local bin
  # One ldd per binary: given several, ldd prints a "BINARY:" header line before each.
  for bin in "$@"; do ldd "$bin"; done | awk '
    /=> \// { print $3; next }          # libfoo.so.N => /path (0x...)
    /^[ \t]+\// { print $1 }            # the dynamic loader: /lib64/ld-linux-x86-64.so.2 (0x...)
  ' | sort -u | while read -r path; do
    printf '%s %s\n' "$(readlink -f "$path")" "$path"
  done
}

build_runtime() {
  local stage=$OUT_STAGE/runtime opt
  opt=$stage/opt/nezha
  rm -rf "$stage"
  mkdir -p "$opt/bin" "$opt/lib"
  cp "$NEZHA_RUNTIME_BUILD/nezha-bench" "$NEZHA_RUNTIME_BUILD/nezha-tune" "$opt/bin/"
  # The plugin's stand-in for NCCL (runtime/tools/nccl_harness.cc): it loads the plugin through
  # NVIDIA's published types and drives it as NCCL's proxy does, so an NCCL job's steering is
  # checked end to end where no GPU and no NCCL are (e2e/nezha, docs/nccl.md).
  cp "$NEZHA_RUNTIME_BUILD/nezha-nccl-harness" "$opt/bin/"
  cp -P "$NEZHA_RUNTIME_BUILD"/libnezha.so* "$opt/lib/"
  # The NCCL net plugin (spec.runtime.integration: nccl finds it through LD_LIBRARY_PATH).
  cp "$NEZHA_RUNTIME_BUILD/libnccl-net-nezha.so" "$opt/lib/"
  cp -r "$REPO/runtime/include" "$opt/include"
  [ -d "$REPO/runtime/python" ] && cp -r "$REPO/runtime/python" "$opt/python"
  find "$opt" \( -name __pycache__ -o -name '*.pyc' \) -prune -exec rm -rf {} +

  local args=(--dir "$stage" --file "$BUSYBOX:/bin/busybox")
  local real path applet
  while read -r real path; do
    args+=(--file "$real:$path")
  done < <(shared_libs "$opt/bin/nezha-bench" "$opt/bin/nezha-tune" "$opt/bin/nezha-nccl-harness" "$opt/lib/libnezha.so" \
    "$opt/lib/libnccl-net-nezha.so")
  for applet in "${RUNTIME_APPLETS[@]}"; do
    args+=(--symlink "/bin/$applet=busybox")
  done
  imagebuilder --tag "$NEZHA_IMAGE_PREFIX/runtime:$NEZHA_IMAGE_TAG" --output "$NEZHA_IMAGES_OUT/runtime.tar" \
    "${args[@]}" \
    --env LD_LIBRARY_PATH=/opt/nezha/lib --env PYTHONPATH=/opt/nezha/python --env PATH=/opt/nezha/bin:/bin \
    --cmd '["/bin/sh","-c","cp -a /opt/nezha/. /nezha-runtime/"]'
}

# ---- the training-example image (hack/images.sh train-example) ----------------------------------
# What a user's torch training image is, with Nezha in it: Debian's python3 (the interpreter the
# pinned venv was made from), torch from that venv, the nezha package with its c10d backend
# (`make build-torch`) and examples/. Only `train-example` builds it: it is ~3 GB.
#
# Measured (torch 2.15.0 from PyPI, Nov 2026): `import torch` needs every library in the NEEDED
# closure of torch/_C*.so even on CPU (libtorch.so and libtorch_python.so link libtorch_cuda.so,
# which links cuBLAS, cuFFT, cuSPARSE, NCCL, ...): 1.6 GB of the venv's 3.0 GB of nvidia-*
# libraries. The rest (cuDNN's engine libraries, cuSOLVER, ...; 1.4 GB) is dlopened only on
# CUDA use, and triton (1 GB) only by torch.compile: both are left out, as are pip, setuptools,
# cmake, pytest and the build tooling.
# The torch wheel's other top-level packages, then its Python dependencies (and numpy, which torch
# warns about at import when it is missing).
TRAIN_DEPS=(torchgen functorch typing_extensions.py filelock fsspec jinja2 markupsafe mpmath networkx sympy
  numpy numpy.libs)

# train_example_key REF: the image reference and a hash of the contents of what it packs that can
# change between builds (`make build-torch` rewrites the nezha package's files on every run, so
# their times say nothing; the venv is identified by its stamp).
train_example_key() {
  {
    echo "$1"
    cat "$NEZHA_TORCH_VENV/.nezha-stamp" 2>/dev/null
    find "$NEZHA_TORCH_BUILD/nezha" "$REPO/examples" "$REPO/hack/images.sh" -type f \
      ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum
  } | sha256sum | cut -d' ' -f1
}

build_train_example() {
  local py pyver site dist tarball ref
  py=$(readlink -f "$NEZHA_TORCH_VENV/bin/python" 2>/dev/null) ||
    fail "NEZHA_TORCH_VENV: $NEZHA_TORCH_VENV/bin/python is missing (run: hack/setup-torch.sh)"
  pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  site=$NEZHA_TORCH_VENV/lib/python$pyver/site-packages
  [ -d "$site/torch" ] || fail "no torch in $site (run: hack/setup-torch.sh)"
  compgen -G "$NEZHA_TORCH_BUILD/nezha/_C*.so" >/dev/null ||
    fail "NEZHA_TORCH_BUILD: no nezha/_C*.so in $NEZHA_TORCH_BUILD (run: make build-torch)"
  [ -x "$BUSYBOX" ] || fail "missing $BUSYBOX (Debian package busybox-static; run hack/setup.sh)"
  require_cmd ldd realpath
  tarball=$NEZHA_IMAGES_OUT/train-example.tar
  ref=$NEZHA_IMAGE_PREFIX/train-example:$NEZHA_IMAGE_TAG
  local key
  key=$(train_example_key "$ref")
  if [ -f "$tarball" ] && [ "$(cat "$tarball.key" 2>/dev/null)" = "$key" ]; then
    log "$ref is up to date ($tarball; nothing it packs changed)"
    return 0
  fi
  # Debian's python looks in /usr/local/lib/pythonX.Y/dist-packages: no PYTHONPATH needed.
  dist=/usr/local/lib/python$pyver/dist-packages
  local stage=$OUT_STAGE/train-example
  rm -rf "$stage"
  mkdir -p "$NEZHA_IMAGES_OUT"
  mkdir -p "$stage/tmp" "$stage/usr/local/bin"
  chmod 0777 "$stage/tmp"
  # torchrun as pip's console script would be (Trainer v2's torch runtime runs it; it reads PET_*).
  printf '%s\n' '#!/usr/bin/python3' 'import sys' 'from torch.distributed.run import main' \
    'sys.exit(main())' >"$stage/usr/local/bin/torchrun"
  chmod 0755 "$stage/usr/local/bin/torchrun"
  local args=(--dir "$stage"
    --file "$py:/usr/bin/python$pyver" --symlink "/usr/bin/python3=python$pyver"
    --dir "/usr/lib/python$pyver:/usr/lib/python$pyver"
    --dir "$site/torch:$dist/torch" --dir "$NEZHA_TORCH_BUILD/nezha:$dist/nezha"
    --dir "$REPO/examples:/opt/nezha/examples" --file "$BUSYBOX:/bin/busybox")
  local d applet
  for d in "${TRAIN_DEPS[@]}"; do
    if [ -d "$site/$d" ]; then
      args+=(--dir "$site/$d:$dist/$d")
    elif [ -f "$site/$d" ]; then
      args+=(--file "$site/$d:$dist/$d")
    else
      fail "$site/$d is missing (torch's dependency; run: hack/setup-torch.sh)"
    fi
  done
  # The packages' metadata: torch 2.15 registers its built-in backends (gloo, ...) and torchrun's
  # log specs through entry points in torch's dist-info.
  local info
  for d in torch typing_extensions filelock fsspec jinja2 markupsafe mpmath networkx sympy numpy; do
    for info in "$site/$d"-*.dist-info; do
      [ -d "$info" ] || fail "no $d-*.dist-info in $site (run: hack/setup-torch.sh)"
      args+=(--dir "$info:$dist/$(basename "$info")")
    done
  done
  for applet in "${RUNTIME_APPLETS[@]}"; do
    args+=(--symlink "/bin/$applet=busybox")
  done
  # Every shared library the interpreter, its extension modules, torch and the nezha backend load:
  # system ones where ldd found them; the nvidia-* ones at their venv path under dist-packages,
  # where torch's RPATH ($ORIGIN/../../nvidia/...) looks. Those inside trees packed above are
  # already there.
  local real path rel
  while read -r real path; do
    path=$(realpath -s -m "$path")
    case $path in
      "$site"/*)
        rel=${path#"$site"/}
        case $rel in torch/* | numpy/* | numpy.libs/* | nezha/*) continue ;; esac
        args+=(--file "$real:$dist/$rel")
        ;;
      *) args+=(--file "$real:$path") ;;
    esac
  done < <(shared_libs "$py" "/usr/lib/python$pyver"/lib-dynload/*.so "$site"/torch/_C*.so \
    "$site/torch/lib/libtorch_global_deps.so" "$NEZHA_TORCH_BUILD"/nezha/_C*.so |
    while read -r real path; do printf '%s %s\n' "$real" "$(realpath -s -m "$path")"; done | sort -u)
  imagebuilder --tag "$ref" --output "$tarball" "${args[@]}" \
    --env PATH=/usr/local/bin:/usr/bin:/bin --env HOME=/tmp --env PYTHONUNBUFFERED=1 \
    --workdir /opt/nezha/examples --cmd '["python3","/opt/nezha/examples/train_cnn.py"]'
  echo "$key" >"$tarball.key"
  log "built $ref in $tarball ($(du -h "$tarball" | cut -f1))"
}

main() {
  case "${1:-}" in
    "") ;;
    --list)
      printf '%s\n' "$NEZHA_IMAGES_OUT"/{operator,rail-agent,runtime}.tar
      return 0
      ;;
    --list-train-example)
      printf '%s\n' "$NEZHA_IMAGES_OUT/train-example.tar"
      return 0
      ;;
    train-example)
      validate_name
      OUT_STAGE=$NEZHA_IMAGES_OUT/stage
      build_train_example
      return 0
      ;;
    push)
      push
      return 0
      ;;
    *) die "unknown argument '$1' (want no argument, --list, train-example, --list-train-example or push)" ;;
  esac
  validate
  OUT_STAGE=$NEZHA_IMAGES_OUT/stage
  mkdir -p "$NEZHA_IMAGES_OUT" "$OUT_STAGE"
  build_operator
  build_rail_agent
  build_runtime
  log "built $NEZHA_IMAGE_PREFIX/{operator,rail-agent,runtime}:$NEZHA_IMAGE_TAG in $NEZHA_IMAGES_OUT"
}

main "$@"
