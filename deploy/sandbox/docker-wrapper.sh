#!/bin/sh
# `docker` in the sandbox image (docs/deploy.md "The image"): starts the engine on first use, then runs the
# real client. Installed as /usr/local/bin/docker, ahead of /usr/bin/docker on PATH.
# Its own session: every command runs under `timeout … bash -c`, whose process group is
# reaped when the command returns, so `dockerd &` would die with the command that started it.
# The DOCKER_WRAPPER_* variables exist for deploy/tests/docker_wrapper_spec.lua.
REAL="${DOCKER_WRAPPER_REAL:-/usr/bin/docker}"
DOCKERD="${DOCKER_WRAPPER_DOCKERD:-dockerd}"
LOG="${DOCKER_WRAPPER_LOG:-/var/log/dockerd.log}"
SOCK="${DOCKER_WRAPPER_SOCK:-/var/run/docker.sock}"
WAIT_S="${DOCKER_WRAPPER_WAIT_S:-40}"

engine_up() {
  [ -S "$SOCK" ] && "$REAL" info >/dev/null 2>&1
}

if ! engine_up; then
  # The default bridge needs forwarding for containers to reach the network.
  if [ -w /proc/sys/net/ipv4/ip_forward ]; then
    echo 1 >/proc/sys/net/ipv4/ip_forward 2>/dev/null || true
  fi
  setsid -f "$DOCKERD" >>"$LOG" 2>&1 </dev/null
  waited=0
  until engine_up; do
    if [ "$waited" -ge "$WAIT_S" ]; then
      echo "docker: the engine did not come up within $WAIT_S s — see $LOG" >&2
      exit 1
    fi
    sleep 1
    waited=$((waited + 1))
  done
fi
exec "$REAL" "$@"
