#!/usr/bin/env bash
# The Debian package on a clean Debian 12 root (issue 14 item 1, docs/deploy.md "One machine"):
# cpack -G DEB from BUILD_DIR, a debootstrap root from deploy/sandbox/make-base's cache,
# `apt-get install ./switchboard_*.deb` inside it (apt resolves Depends from the archive),
# then the installed tree — with no build tree and no checkout inside the root — must run
# `switchboard version`, a policy check and the console; the maintainer scripts must have made
# the user and the 0600 environment files; a copy of the installed tree moved elsewhere must
# still run; and `systemd-analyze verify` must pass on the installed units. Last, a build with
# a later version installs over this one as an upgrade, then a purge, then the upgrade from the
# 0.1.0 layout. What the units do when systemd starts them — the services walled, their
# secrets, instance deaths, reload, stop, purge of their directories — is
# deploy/tests/package_systemd.sh's, under a real systemd (issue 38; it replaced the stage here
# that imitated the units with setpriv and pivot_root).
#   deploy/tests/package.sh BUILD_DIR
. "$(dirname "$0")/lib.sh"
build="$(cd "${1:?BUILD_DIR}" && pwd)"
need_root "the package test"
command -v debootstrap >/dev/null || skip "debootstrap is not installed (scripts/bootstrap installs it)"
command -v cpack >/dev/null || skip "cpack is not installed"

work="$(mktemp -d /var/tmp/switchboard-package.XXXXXX)"
# SB_PACKAGE_KEEP=1 keeps the work directory (and the installed root in it) to look into.
if [ "${SB_PACKAGE_KEEP:-0}" = 1 ]; then trap 'echo "kept: $work" >&2' EXIT; else trap 'rm -rf "$work"' EXIT; fi
# A second cpack from the same build directory at the same moment, as deploy/package_systemd's
# and build-image's (deploy/image_smoke) run beside this one, with a version of its own: each
# package carries its own changelog (they once shared the build directory's deb/changelog.gz:
# one package had the other's entry, or a run found none).
(cd "$build" && SWITCHBOARD_BUILD_COMMIT="$(git -C "$REPO_DIR" rev-parse HEAD)" \
   SWITCHBOARD_BUILT_AT="$(date -u -d '+2 days' +%Y-%m-%dT%H:%M:%SZ)" \
   cpack -G DEB -B "$work/beside" >"$work/cpack-beside.log" 2>&1) & beside=$!
(cd "$build" && cpack -G DEB -B "$work/deb" >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log" >&2; fail "cpack -G DEB"; }
wait "$beside" || { cat "$work/cpack-beside.log" >&2; fail "a second cpack at the same time"; }
deb="$(ls "$work"/deb/switchboard_*.deb)"
ok "cpack -G DEB built $(basename "$deb"), and another at the same time"
# first_entry DEB: the first line of the changelog.gz it carries
first_entry() { dpkg-deb --fsys-tarfile "$1" | tar -xO ./usr/share/doc/switchboard/changelog.gz | zcat | sed -n 1p; }
for d in "$deb" "$work"/beside/switchboard_*.deb; do
  expect_eq "switchboard ($(dpkg-deb -f "$d" Version)) unstable; urgency=medium" "$(first_entry "$d")" \
    "$(basename "$d")'s changelog begins with its own version"
done
version="$(dpkg-deb -f "$deb" Version)"
expect_match '^0\.1\.0\+git[0-9]{14}\.[0-9a-f]{7}(\.dirty)?$' "$version" \
  "the package's version is its build's own (0.1.0+git<commit time>.<short commit>)"

tarball="$("$DEPLOY_DIR/sandbox/make-base" --rootfs)"
root="$work/root"
mkdir "$root"
tar -C "$root" -xf "$tarball"
# The tarball's "./" keeps make-base's mktemp mode (0700); a real / is 0755, and the bot's
# stage runs as the switchboard user, which must traverse it.
chmod 0755 "$root"
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
expect_eq "README" "$(in_root ls /etc/switchboard/policies)" \
  "/etc/switchboard/policies holds no shipped policy, only the overlays' README"
expect_eq "/etc/switchboard/policies/README" "$(in_root dpkg-query --control-show switchboard conffiles | tr -d ' ')" \
  "the one conffile is the overlays' README (the shipped policies live under /usr/share, replaced on upgrade)"
expect_match 'execution\.lua' "$(in_root ls /usr/share/switchboard/policies)" "the shipped policies are under /usr/share/switchboard/policies"
in_root switchboard policy check /etc/switchboard/policies >"$work/check.log" 2>&1 \
  || { cat "$work/check.log" >&2; fail "switchboard policy check /etc/switchboard/policies"; }
ok "the overlay directory the services read passes policy check"
# One bearer for the bot and sandboxd, generated at install, never printed.
token_of() { in_root sed -n 's/^SANDBOX_TOKEN=//p' "/etc/switchboard/$1"; }
sandbox_token="$(token_of sandboxd.env)"
expect_match '^[0-9a-f]{64}$' "$sandbox_token" "the postinst generated a 256-bit SANDBOX_TOKEN into sandboxd.env"
expect_eq "$sandbox_token" "$(token_of bot.env)" "bot.env holds the same SANDBOX_TOKEN"
expect_eq "http://127.0.0.1:8080" "$(in_root sed -n 's/^SANDBOX_URL=//p' /etc/switchboard/bot.env)" \
  "bot.env points the bot at the sandboxd beside it"
! grep -qF "$sandbox_token" "$work/apt.log" || fail "the install printed the SANDBOX_TOKEN"
ok "the install did not print the token"
expect_match 'Wants=.*switchboard-sandboxd\.service' "$(in_root cat /lib/systemd/system/switchboard-bot.service)" \
  "the bot's unit wants the sandboxd beside it"
for f in copyright changelog.gz; do
  in_root test -s "/usr/share/doc/switchboard/$f" || fail "no /usr/share/doc/switchboard/$f"
done
expect_match "^switchboard \($(printf '%s' "$version" | sed 's/[.+]/\\&/g')\)" \
  "$(in_root zcat /usr/share/doc/switchboard/changelog.gz | head -1)" "the changelog's first entry is this version"
doctor="$(in_root switchboard doctor 2>&1 || true)"
expect_match 'installed host: checking /etc/switchboard/policies and /etc/switchboard/bot\.env' "$doctor" \
  "doctor on the installed host checks the policies and bot.env the services load"

# bot.env without SANDBOX_URL: the bot's agents would go to the local executor's walls, which
# its unit's User=switchboard cannot build (they need root); doctor says so and what to set.
# (SLACK_API_URL: a closed port on loopback, so the Slack check fails without leaving the host.)
sed -i 's/^SANDBOX_URL=/#doctor# SANDBOX_URL=/' "$root/etc/switchboard/bot.env"
doctor="$(in_root env SLACK_BOT_TOKEN=xoxb-doctor SLACK_API_URL=http://127.0.0.1:9/api switchboard doctor 2>&1 || true)"
sed -i 's/^#doctor# SANDBOX_URL=/SANDBOX_URL=/' "$root/etc/switchboard/bot.env"
expect_match 'FAIL +bot +.*they need root.*fix: set SANDBOX_URL=http://127\.0\.0\.1:8080 and SANDBOX_TOKEN \(the one in /etc/switchboard/sandboxd\.env\) in /etc/switchboard/bot\.env' \
  "$doctor" "doctor on the installed host fails a bot.env without SANDBOX_URL: the bot's user cannot build the local walls"

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
  /lib/systemd/system/switchboard-bot.service switchboard-bot@8081.service 2>&1)" || fail "systemd-analyze verify: $verify"
[ -z "$verify" ] || fail "systemd-analyze verify had something to say: $verify"
ok "systemd-analyze verify passes on the installed units (switchboard-bot@.service as its instance @8081)"

# ---- an upgrade: a later build installs over this one ------------------------------------
printf 'bash.max_ms = 30 * minute\n' >"$root/etc/switchboard/policies/timeouts.lua"
(cd "$build" && SWITCHBOARD_BUILD_COMMIT="$(git -C "$REPO_DIR" rev-parse HEAD)" \
   SWITCHBOARD_BUILT_AT="$(date -u -d '+1 day' +%Y-%m-%dT%H:%M:%SZ)" \
   cpack -G DEB -B "$work/deb2" >"$work/cpack2.log" 2>&1) || { cat "$work/cpack2.log" >&2; fail "the second cpack"; }
deb2="$(ls "$work"/deb2/switchboard_*.deb)"
version2="$(dpkg-deb -f "$deb2" Version)"
dpkg --compare-versions "$version2" gt "$version" || fail "the later build's version $version2 is not above $version"
ok "a later build has a higher version ($version2 > $version)"
cp "$deb2" "$root/tmp/"
in_root apt-get install -y --no-install-recommends "/tmp/$(basename "$deb2")" >"$work/upgrade.log" 2>&1 \
  || { tail -30 "$work/upgrade.log" >&2; fail "apt-get install ./$(basename "$deb2") over $version"; }
expect_match "Unpacking switchboard \($(printf '%s' "$version2" | sed 's/[.+]/\\&/g')\) over" "$(cat "$work/upgrade.log")" \
  "apt-get install ./switchboard_….deb upgrades (not \"already the newest version\")"
expect_eq "$version2" "$(in_root dpkg-query -W -f='${Version}' switchboard)" "the installed version is the later build's"
expect_eq "$sandbox_token" "$(token_of sandboxd.env)" "the upgrade kept sandboxd.env (and its token) as it was"
expect_match 'SLACK_BOT_TOKEN=' "$(in_root cat /etc/switchboard/bot.env)" "the upgrade kept the operator's bot.env"
expect_eq "bash.max_ms = 30 * minute" "$(in_root cat /etc/switchboard/policies/timeouts.lua)" "the upgrade kept the operator's overlay"
expect_match 'bash\.max_ms 1200000 → 1800000' "$(in_root switchboard policy show --diff /etc/switchboard/policies)" \
  "the overlay applies over the upgraded shipped set"

# ---- purge, and the upgrade from a package that copied the policies into /etc ------------
in_root dpkg --purge switchboard >"$work/purge.log" 2>&1 || { cat "$work/purge.log" >&2; fail "dpkg --purge switchboard"; }
in_root test ! -e /etc/switchboard/bot.env || fail "the purge left /etc/switchboard/bot.env"
ok "a purge removes the environment files the postinst made"
# What is left is the operator's own (the overlay written above): a clean /etc for the old layout.
rm -rf "$root/etc/switchboard"
# The layout of packages before 0.1.0+git, rebuilt with dpkg-deb: every shipped policy a
# conffile under /etc/switchboard/policies.
old="$work/old-0.1.0"
mkdir -p "$old/DEBIAN" "$old/etc/switchboard/policies"
# the policies those packages shipped: the list the maintainer scripts remove (deploy/debian/preinst)
for p in agents errors execution github isolation slack timeouts; do
  cp "$REPO_DIR/policies/$p.lua" "$old/etc/switchboard/policies/"
done
(cd "$old" && find etc -type f | sed 's|^|/|' | sort) >"$old/DEBIAN/conffiles"
printf 'Package: switchboard\nVersion: 0.1.0\nArchitecture: all\nMaintainer: spec <spec@localhost>\nDescription: the layout before 0.1.0+git\n' \
  >"$old/DEBIAN/control"
dpkg-deb --root-owner-group -b "$old" "$root/tmp/switchboard_0.1.0_all.deb" >/dev/null
in_root dpkg -i /tmp/switchboard_0.1.0_all.deb >"$work/old.log" 2>&1 || { cat "$work/old.log" >&2; fail "dpkg -i the 0.1.0 layout"; }
printf '\n-- edited by the operator\nspare_instances = 0\n' >>"$root/etc/switchboard/policies/isolation.lua"
in_root apt-get install -y --no-install-recommends "/tmp/$(basename "$deb2")" >"$work/upgrade-old.log" 2>&1 \
  || { tail -30 "$work/upgrade-old.log" >&2; fail "apt-get install ./$(basename "$deb2") over 0.1.0"; }
expect_eq "README isolation.lua.dpkg-bak" "$(in_root ls /etc/switchboard/policies | tr '\n' ' ' | sed 's/ $//')" \
  "the upgrade from 0.1.0 removed the unedited policy copies and kept the edited one as .dpkg-bak"
in_root switchboard policy check /etc/switchboard/policies >"$work/check2.log" 2>&1 \
  || { cat "$work/check2.log" >&2; fail "policy check after the upgrade from 0.1.0"; }
ok "the overlay directory left by that upgrade passes policy check (the shipped set under /usr/share)"

echo "$checks passed, 0 failed"
