# Shared by the deploy tests (deploy/CMakeLists.txt runs them through ctest).
# Exit 77 = skipped (ctest SKIP_RETURN_CODE), with the reason on stderr.
set -euo pipefail
DEPLOY_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO_DIR="$(cd "$DEPLOY_DIR/.." && pwd)"
checks=0

skip() { echo "SKIPPED: $*" >&2; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { checks=$((checks + 1)); echo "ok $checks - $*"; }
# expect_eq WANT GOT WHAT
expect_eq() { [ "$1" = "$2" ] || fail "$3: want '$1', got '$2'"; ok "$3"; }
# expect_match REGEX TEXT WHAT
expect_match() { printf '%s' "$2" | grep -Eq -- "$1" || fail "$3: '$1' not in: $2"; ok "$3"; }
need_root() { [ "$(id -u)" -eq 0 ] || skip "$1 needs root (debootstrap, chroot, podman)"; }
