#!/usr/bin/env bash
# The Debian package on a clean Debian 12 root (issue 14 item 1, docs/deploy.md "One machine"):
# cpack -G DEB from BUILD_DIR, a debootstrap root from deploy/sandbox/make-base's cache,
# `apt-get install ./switchboard_*.deb` inside it (apt resolves Depends from the archive),
# then the installed tree — with no build tree and no checkout inside the root — must run
# `switchboard version`, a policy check and the console; the maintainer scripts must have made
# the user and the 0600 environment files; a copy of the installed tree moved elsewhere must
# still run; and `systemd-analyze verify` must pass on the installed units.
#   deploy/tests/package.sh BUILD_DIR
. "$(dirname "$0")/lib.sh"
build="$(cd "${1:?BUILD_DIR}" && pwd)"
need_root "the package test"
command -v debootstrap >/dev/null || skip "debootstrap is not installed (scripts/bootstrap installs it)"
command -v cpack >/dev/null || skip "cpack is not installed"

work="$(mktemp -d /var/tmp/switchboard-package.XXXXXX)"
trap 'rm -rf "$work"' EXIT
(cd "$build" && cpack -G DEB -B "$work/deb" >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log" >&2; fail "cpack -G DEB"; }
deb="$(ls "$work"/deb/switchboard_*.deb)"
ok "cpack -G DEB built $(basename "$deb")"

tarball="$("$DEPLOY_DIR/sandbox/make-base" --rootfs)"
root="$work/root"
mkdir "$root"
tar -C "$root" -xf "$tarball"
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp "$deb" "$root/tmp/"
[ ! -e "$root$build" ] && [ ! -e "$root$REPO_DIR" ] || fail "the clean root holds the build tree"
ok "the clean root holds neither $build nor $REPO_DIR"

# Everything inside the root runs in a mount and PID namespace of its own, so /proc (mounted
# there for apt and systemd-analyze) goes away with it.
in_root() {
  unshare --mount --pid --fork --mount-proc="$root/proc" chroot "$root" \
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}

in_root apt-get update -qq >"$work/apt.log" 2>&1 || { tail -20 "$work/apt.log" >&2; fail "apt-get update in the root"; }
in_root apt-get install -y -qq --no-install-recommends "/tmp/$(basename "$deb")" >>"$work/apt.log" 2>&1 \
  || { tail -30 "$work/apt.log" >&2; fail "apt-get install ./$(basename "$deb") in a clean Debian 12 root"; }
ok "apt-get install ./$(basename "$deb") resolved its Depends and ran its maintainer scripts"

want="$("$build/switchboard" version)"
expect_eq "$want" "$(in_root switchboard version)" "the installed switchboard version is the build's stamp"
expect_match '^/usr/bin/switchboard$' "$(in_root sh -c 'command -v switchboard')" "switchboard is on PATH at /usr/bin"

user="$(in_root getent passwd switchboard)" || fail "the postinst made no switchboard user"
uid="$(echo "$user" | cut -d: -f3)"
[ "$uid" -lt 1000 ] || fail "switchboard is not a system user (uid $uid)"
expect_match 'nologin|/bin/false' "$user" "switchboard is a system user with no login shell"

for f in bot.env sandboxd.env; do
  expect_eq "600 root:root" "$(in_root stat -c '%a %U:%G' /etc/switchboard/$f)" "/etc/switchboard/$f is 0600, root's own"
done
expect_eq "750 root:switchboard" "$(in_root stat -c '%a %U:%G' /etc/switchboard/policies)" \
  "/etc/switchboard/policies is readable by the service only"
expect_match 'timeouts\.lua' "$(in_root dpkg-query --control-show switchboard conffiles)" \
  "the operator's policies are conffiles (dpkg keeps edits across upgrades)"
in_root switchboard policy check /etc/switchboard/policies >"$work/check.log" 2>&1 \
  || { cat "$work/check.log" >&2; fail "switchboard policy check /etc/switchboard/policies"; }
ok "the shipped policies under /etc/switchboard/policies pass policy check"

console="$(printf 'run `echo from-the-package`\n' | in_root env SWITCHBOARD_STATE_DIR=/tmp/state switchboard console 2>&1)" \
  || fail "the console exited non-zero: $console"
expect_match 'from-the-package' "$console" "the console from the package runs a command"

# A tree installed into one prefix and then moved finds its program beside the binary.
cmake --install "$build" --prefix "$root/opt/first" >/dev/null
mv "$root/opt/first" "$root/opt/moved"
expect_eq "$want" "$(in_root /opt/moved/bin/switchboard version)" "a moved install still finds its Lua program"
expect_match 'moved' "$(printf 'run `echo moved`\n' | in_root env SWITCHBOARD_STATE_DIR=/tmp/s2 /opt/moved/bin/switchboard console 2>&1)" \
  "the moved tree's console runs a command"
# SWITCHBOARD_LUA_DIR wins over the installed tree: a copy whose `version` says so.
in_root sh -c 'cp -a /usr/share/switchboard/lua /opt/custom-lua &&
  printf "return { name = \"version\", summary = \"\", help = \"\", run = function() print(\"custom-lua\") return 0 end }\n" \
    >/opt/custom-lua/switchboard/commands/version.lua'
expect_eq "custom-lua" "$(in_root env SWITCHBOARD_LUA_DIR=/opt/custom-lua switchboard version)" \
  "SWITCHBOARD_LUA_DIR overrides the installed Lua program"

# systemd-analyze verify on the units as installed, with the binary they name in place.
in_root apt-get install -y -qq --no-install-recommends systemd >>"$work/apt.log" 2>&1 \
  || { tail -20 "$work/apt.log" >&2; fail "apt-get install systemd in the root"; }
verify="$(in_root systemd-analyze verify /lib/systemd/system/switchboard-sandboxd.service \
  /lib/systemd/system/switchboard-bot.service 2>&1)" || fail "systemd-analyze verify: $verify"
[ -z "$verify" ] || fail "systemd-analyze verify had something to say: $verify"
ok "systemd-analyze verify passes on both installed units"

echo "$checks passed, 0 failed"
