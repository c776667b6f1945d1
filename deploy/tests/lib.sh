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
# expect_match REGEX TEXT WHAT. The text goes in as a here-string, not through a pipe: bash's
# printf writes line by line, grep -q exits at its match, and the next line's write then fails
# the pipe under pipefail (a fresh clone's deploy/package failed so, the line listed in the text).
expect_match() { grep -Eq -- "$1" <<<"$2" || fail "$3: '$1' not in: $2"; ok "$3"; }
need_root() { [ "$(id -u)" -eq 0 ] || skip "$1 needs root (debootstrap, chroot, podman)"; }
