/* An instance's outbound network without a process of its own (issue 43; docs/isolation.md
 * "Outbound through a bridge"): where sandboxd is root of the host's user namespace, the
 * network namespace it runs in holds one bridge, made once at its start (bridge-up) and removed
 * at its stop (bridge-down; the next start removes a kill -9's leftover first); each instance
 * gets a veth pair whose host end is an isolated port of that bridge and whose other end is
 * its eth0, with an address, the bridge's as its gateway, and no IPv6. Everything here speaks
 * rtnetlink directly (no `ip`, no CNI plugin process per instance). What an instance may reach
 * is nftables' rules on the bridge (lua/switchboard/shell/bridge.lua writes them), not this. */
#ifndef SB_WALLS_BRIDGE_H
#define SB_WALLS_BRIDGE_H

#include <stddef.h>

/* `switchboard-walls bridge-up --bridge NAME --address A.B.C.D/PREFIX`: removes a bridge of that
 * name left by a killed server, makes it again with the address (IPv6 off on it) and turns IPv4
 * forwarding on in this network namespace. Prints "forwarding was-on" or "forwarding was-off"
 * (the caller's rules keep the host's other forwarding off in the second case).
 * `switchboard-walls bridge-down --bridge NAME [--count N]`: removes it, or NAME0 … NAME<N-1>
 * (gone already is fine).
 * `switchboard-walls bridge-sweep --bridge SERVER`: removes every link of this network namespace
 * named SERVER + "b" + digits (its bridges) or SERVER + "-" + digits (its instances' host ends),
 * found by an RTM_GETLINK dump, and prints "removed NAME" for each: what a killed server of that
 * name left, however many bridges it had. No other name is touched.
 * Returns the process's exit status (70 with a "walls:" line on failure). */
int walls_bridge_main(int argc, char **argv);

/* Attaches the instance whose init is `inner` to its bridge, as `spec` says:
 * "BRIDGE,PORT,A.B.C.D/PREFIX,GATEWAY" — the bridge made (GATEWAY/PREFIX) when missing; PORT the
 * host end's name (a leftover of that name, an
 * instance whose namespace the kernel has not yet torn down, is removed first). Must run as root
 * of the host's user namespace, in the bridge's network namespace; it enters the instance's
 * (this process's network namespace changes). Returns 0, or -1 with what failed and why in `why`. */
int walls_bridge_attach(const char *spec, long inner, char *why, size_t why_size);

#endif
