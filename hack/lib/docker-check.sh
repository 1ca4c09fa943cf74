# shellcheck shell=bash
# docker_problem: print what is wrong with this machine's Docker and exactly what to do about it,
# and return 1; print nothing and return 0 when `docker info` answers. Used by everything on the
# kind path (hack/setup.sh kind, hack/kind.sh, hack/kind-sandbox/node-image.sh, hack/demo.sh), so
# a machine without Docker gets the same instructions wherever that is found out.
DOCKER_INSTALL_HINT="install the Debian package docker.io (apt-get install docker.io)"
DOCKER_START_HINT="start it (systemctl start docker; where there is no systemd: dockerd &). In Nezha's own development sandbox register its runtime first: hack/kind-sandbox/README.md"

docker_problem() {
  if ! command -v docker >/dev/null 2>&1; then
    echo "Docker is not installed: $DOCKER_INSTALL_HINT, then $DOCKER_START_HINT"
    return 1
  fi
  docker info >/dev/null 2>&1 && return 0
  # A docker CLI alone (some images ship one) is not an engine; a remote DOCKER_HOST needs none here.
  if [ -z "${DOCKER_HOST:-}" ] && ! command -v dockerd >/dev/null 2>&1; then
    echo "the Docker engine is not installed (a docker CLI is, but no dockerd): $DOCKER_INSTALL_HINT, then $DOCKER_START_HINT"
  else
    echo "Docker's daemon does not answer (docker info failed): $DOCKER_START_HINT"
  fi
  return 1
}
