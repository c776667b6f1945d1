-- The walls around every sandbox instance (docs/isolation.md). Operator-edited; reloaded on
-- SIGHUP like the others: an instance takes the numbers current when it wakes and keeps them
-- until it sleeps. Units: bytes (KiB, MiB).

-- sandboxd always walls its instances (it refuses to start when the kernel cannot, unless
-- started with --no-walls). The local executor walls a front's threads when local_walls says
-- so for that front: "default" for every front not named. A front that serves other people
-- (`switchboard slack`) is walled; only a person's own terminal (the console, `switchboard
-- exec`) runs unwalled, as its user, and every local card says which. Walled threads need what
-- sandboxd needs (root, bwrap, user namespaces, cgroups); without it provisioning is refused in
-- words, never run unwalled. `switchboard slack` refuses to start with an unwalled executor
-- unless given --allow-unwalled-commands (docs/isolation.md "Fronts that serve other people").
-- true/false alone applies to every front.
local_walls = { default = true, console = false, exec = false }

-- Network of an instance whose agent declares none (policies/agents.lua network): "host"
-- (outbound access through pasta — git, npm and gh need it — never the host's loopback
-- services) or "none" (loopback only). Either way a network namespace of its own. Fixed
-- when the instance is made; sandboxd also applies it to requests that carry no network.
network = "host"
-- How a "host" instance of sandboxd reaches outside (docs/isolation.md "Outbound through a
-- bridge"): "bridge" — a veth pair on one bridge sandboxd makes at its start in its network
-- namespace, with nftables rules (no process per instance; needs root of the host's user
-- namespace and nft); "pasta" — a pasta process per instance (rootless and user-namespace
-- deployments); "auto" — the bridge where sandboxd can make it, else pasta. The resident and the
-- local executor always use pasta. Read at start.
outbound = "auto"
-- The bridges' addresses: a /22 per bridge of 1,021 instances (a Linux bridge holds 1,024 ports),
-- .1 of each the bridge's; it must hold uid_count's bridges (65,536 instances: 65 /22s, a /15).
bridge_subnet = "10.212.0.0/15"
-- Where no instance on the bridge connects (the host itself, any of its addresses, always; IPv6
-- always; the name servers of /etc/resolv.conf on port 53 excepted): private, shared, link-local
-- (a cloud's metadata service), loopback, benchmark and multicast ranges.
bridge_refused = {
  "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
  "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/3",
}

-- Per instance, through cgroups (v1 memory/pids/cpu controllers, or v2). A command that hits
-- one is answered in words naming the setting.
memory_bytes = 4096 * MiB        -- RAM + page cache of all its processes; past it the kernel kills
pids_max = 160                   -- processes and threads at once; past it fork fails
cpu_percent = 200                -- CPU time per wall second (a CFS quota), in % of one core

-- Per process, through rlimits.
open_files = 256                 -- RLIMIT_NOFILE

-- The host's file table (fs.file-max) is shared by everything on the host: an instance can hold
-- at most pids_max × open_files of it, and a full fleet (timeouts sandbox.max_instances plus
-- spare_instances) at most this percentage of it — checked when the policy loads (and by
-- sandboxd at start for --max-instances), so that no fleet can exhaust the table. With the
-- numbers above: 160 × 256 = 40,960 per instance, 26 instances = 1.07 M of a 24 GiB host's
-- 2.47 M (43 %). A bigger fleet needs lower numbers here or a host with a larger table.
fleet_files_percent = 50
-- That share is held by sandboxd's watch, not by the kernel: a file that is mmap'd and then
-- closed keeps its file object with no descriptor, which no rlimit or cgroup counts. sandboxd
-- reads the host's count (/proc/sys/fs/file-nr) every file_table_check_ms; when it has risen
-- file_table_rise files since it last looked, it counts each awake instance's descriptors and
-- file-backed mappings, and an instance over pids_max × open_files is ended (the command running
-- in it is told; the thread's next command gets a fresh instance on the same /workspace files).
-- docs/isolation.md "The host's file table".
file_table_check_ms = 100
file_table_rise = 16384
file_size_bytes = 4096 * MiB     -- RLIMIT_FSIZE: no single file grows past this

-- The workspace's size. sandboxd: each workspace is a file system of this size of its own (an
-- image loop-mounted for its instance only), so a write past it fails while the command writes
-- ("No space left on device", then a line naming this setting); deleting always works. Every
-- byte of it is reserved on the host's disk when its instance is made (and stays reserved while
-- the workspace exists), so the fleet never promises more disk than the host has: a thread
-- whose workspace does not fit beside disk_reserve_bytes is refused in words ("the host's disk
-- is full: …"), and sandboxd warns at start when max_instances (+ spare_instances) workspaces
-- and the reserve exceed the disk (docs/isolation.md "The host's disk"). 25 instances + 1 spare
-- of 2 GiB take 52 GiB.
-- The resident's worktrees: measured after commands; past it the next command or write is
-- refused in words until files are deleted (docs/isolation.md "Workspace size while writing").
workspace_max_bytes = 2048 * MiB
-- What the host's disk keeps free beside the workspaces (its logs, sandboxd's state, the
-- resident's repositories): an instance whose workspace would take it is not made.
disk_reserve_bytes = 2048 * MiB
-- Loop devices (docs/isolation.md "Loop devices given back"): when an instance is gone, the
-- loop device its workspace was attached to is removed, unless its number is below this — a
-- pool kept free for the next starts (the kernel's own loop0-7 among them). Each device on the
-- host costs every sysinfo() (each `bash`) a little: ~40 ns here.
loop_devices_kept = 32
-- Slept workspaces (docs/sandboxd.md "Instances"): an instance that sleeps (idle past timeouts
-- sandbox.sleep_after, or sandboxd stopping) keeps its workspace on the host's disk, and the
-- thread's next request remounts it in a fresh instance — files, dependencies, git state as left.
-- They are kept under this budget: their bytes on the host's disk together (a slept image gives
-- its free blocks back to the disk: it holds about its files' size; its wake reserves it whole
-- again, or is refused in words while the disk is full) and the time since each slept (never past policies/record.lua
-- retention_ms: a workspace never outlives its thread's record). Past either the oldest go
-- first, and the thread's next request is told "workspace expired (policy …)" and re-clones.
slept_max_bytes = 20480 * MiB
slept_max_age_ms = 7 * 24 * hour
-- Repository bases (docs/sandboxd.md "Repository bases"): a new thread on a repository starts
-- from a copy of a workspace that cloned it and ran its .switchboard/setup.sh (docs/agent.md
-- "A repository's setup"). A base older than this, or one a push to the repository marked
-- stale, is prepared again by the next new thread. 0: never used.
bases_refresh_ms = 30 * minute
-- How long a repository's .switchboard/setup.sh may run after a fresh clone; past it the setup
-- is killed, the card says so, and no base is kept from that clone.
setup_timeout_ms = 10 * minute
-- How sandboxd holds it: "filesystem" (the kernel, while writing; needs the loop driver and
-- /dev/loop-control: a host without them refuses to start, naming them) or "measured" (after
-- commands, as the resident does: one command can write past it). Only where no loop device can
-- be had, such as a pod in a user namespace of its own (deploy/kubernetes/sandboxd.yaml).
workspace_size = "filesystem"

-- Instances started at once by one server; more wait their turn. Each start is a few spawns
-- on the server's event loop: a burst of new threads then never holds up the heartbeats of
-- commands already running (issue 28). Also how many its shutdown puts to sleep at once.
starts_at_once = 8

-- Instances built ahead, each taken by the next new thread (its first command then skips the
-- instance's start: cgroups, namespaces, mounts, 15-20 ms on a quiet host and far more under
-- load); a taken one is replaced in the background. 0: every instance is built on demand.
spare_instances = 1

-- Host uids/gids for instances: each awake instance gets base + n (n < uid_count), its own,
-- mapped to uid 1000 inside. Pick a range no host account uses. Several walled servers on one
-- host (two sandboxd, a sandboxd and a resident) never share uids: each registers its block
-- (/run/switchboard/walls) and takes the first of uid_blocks blocks of uid_count uids from
-- uid_base that no other holds — base = uid_base + k * uid_count — or refuses to start, naming
-- the servers in the way. Read at start: a reload does not move a running server's block.
uid_base = 1200000
uid_count = 65536
uid_blocks = 16

-- What an instance sees of the host: an empty read-only root with these top-level entries of
-- rootfs bound read-only (a sandbox image's root may be given instead of "/"), then each of
-- hide covered by an empty directory (or /dev/null for a file). An allow-list: what a build
-- needs (programs, libraries, /etc's configuration), not /var (every server's state lives there:
-- /var/lib/sandboxd, /var/lib/resident, /var/lib/switchboard), /home, /root or /srv. Whatever this
-- says, no walled server's --root on the host (its own or another's) is ever in view; the
-- workspace appears at /workspace, /tmp and /dev/shm are private.
rootfs = "/"
-- The instance's host name (its UTS namespace is its own either way). "" keeps the name it
-- starts with: in a container whose seccomp profile refuses sethostname without CAP_SYS_ADMIN
-- (podman's and Docker's defaults), the sandbox image sets this (docs/deploy.md).
hostname = "sandbox"
-- A walled command's HOME (the server's is never in view): this directory of the instance's
-- private /tmp, made empty and 0700 for its uid when the instance wakes, so npm's and pip's
-- caches, cargo, go's build cache and `git config --global` work. Outside the workspace (whose
-- files publish commits); lost with /tmp when the instance sleeps, and bounded like /tmp (its
-- memory). A request's own env HOME still wins; unwalled commands keep the server's HOME.
home = "/tmp/home"
-- The name of a walled command's user (uid 1000 inside), in the instance's own /etc/passwd and
-- /etc/group: root, this user (HOME the one above, /bin/bash) and nobody — the host's accounts
-- are not in view, so `id -un` answers this name.
user_name = "sandbox"
expose = { "usr", "bin", "sbin", "lib", "lib32", "lib64", "etc", "opt" }
hide = {
  "/etc/ssh", "/etc/switchboard", "/etc/sudoers", "/etc/sudoers.d",
  "/var/lib/switchboard", "/var/log", "/var/backups", "/var/cache",
}

-- Where instance cgroups go: "auto" = below sandboxd's own cgroup (each controller's, on v1);
-- else a cgroup path such as "/switchboard" (below each controller's mount) delegated to it.
cgroup_parent = "auto"
